//! Round-trip and robustness properties of the frame codec.

use super::*;
use proptest::prelude::*;

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        "[ -~]{0,20}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (any::<u32>(), any::<u32>(), "[ -~]{0,16}", "[a-z0-9]{0,16}").prop_map(|(a, b, w, i)| {
            Message::Hello {
                protocol_min: a,
                protocol_max: b,
                worker: w,
                instance_id: i,
            }
        }),
        any::<u32>().prop_map(|p| Message::Welcome { protocol: p }),
        (any::<u64>(), "[a-z._]{1,24}", json_value())
            .prop_map(|(id, method, body)| Message::Request { id, method, body }),
        (any::<u64>(), json_value()).prop_map(|(id, body)| Message::Response { id, body }),
        (
            proptest::option::of(any::<u64>()),
            "[a-z_]{1,12}",
            "[ -~]{0,40}"
        )
            .prop_map(|(id, code, message)| Message::Error { id, code, message }),
        (any::<u64>(), "\\PC{0,40}").prop_map(|(id, output)| Message::Output { id, output }),
        any::<u64>().prop_map(|id| Message::Cancel { id }),
    ]
}

proptest! {
    #[test]
    fn frames_round_trip(msgs in prop::collection::vec(message(), 1..6)) {
        let mut buf = Vec::new();
        for m in &msgs {
            write_message(&mut buf, m, DEFAULT_MAX_FRAME).unwrap();
        }
        let (decoded, rest) = decode_frames(&buf, DEFAULT_MAX_FRAME);
        prop_assert_eq!(rest.unwrap(), buf.len());
        prop_assert_eq!(&decoded, &msgs);
        let mut r = &buf[..];
        for m in &msgs {
            prop_assert_eq!(&read_message(&mut r, DEFAULT_MAX_FRAME).unwrap(), m);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_frames(&bytes, 128);
        let _ = read_message(&mut &bytes[..], 128);
    }
}
