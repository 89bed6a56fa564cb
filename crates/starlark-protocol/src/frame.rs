//! The framed protocol between the host and a worker process over the
//! child's stdin/stdout. Specified in `docs/protocol.md`.
//!
//! A frame is a 4-byte big-endian length `N` followed by `N` bytes of UTF-8
//! JSON encoding one [`Message`]. `N` may not exceed the negotiated maximum
//! (default [`DEFAULT_MAX_FRAME`], 1 MiB), checked on both read and write.
//! Any malformed, oversize, truncated or unsolicited frame is a terminal
//! [`ProtocolError`]: the host kills the worker, it never tries to resync.
//!
//! Messages use serde's externally tagged enum form on purpose: crates in
//! the same build (the `starlark` crate) switch on serde_json's
//! `arbitrary_precision`, which breaks internally tagged enums holding
//! numbers.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// Default maximum frame size: 1 MiB.
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;

/// One protocol message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Message {
    /// First frame, worker → host: who the worker is and what it speaks.
    Hello {
        /// Lowest protocol version the worker speaks.
        protocol_min: u32,
        /// Highest protocol version the worker speaks.
        protocol_max: u32,
        /// Worker implementation and version, e.g. `cordon-starlark-worker/0.1.0`.
        worker: String,
        /// The instance id the host gave the worker on its command line.
        instance_id: String,
    },
    /// Host → worker answer to `Hello`: the version both will use.
    Welcome {
        /// The chosen version.
        protocol: u32,
    },
    /// A call, in either direction. `id` is unique per sender.
    Request {
        /// Request id, echoed by the response.
        id: u64,
        /// Method name, e.g. `load_package`, `call`, `module.http.request`.
        method: String,
        /// Method-specific body.
        body: serde_json::Value,
    },
    /// A successful answer to the request with the same `id`.
    Response {
        /// The request's id.
        id: u64,
        /// Method-specific result.
        body: serde_json::Value,
    },
    /// A failed answer to the request with the same `id`, or (with no id)
    /// a terminal complaint about the connection.
    Error {
        /// The request's id, if the error answers one.
        id: Option<u64>,
        /// A stable machine-readable code, e.g. `permission_denied`.
        code: String,
        /// A human-readable message.
        message: String,
    },
    /// Worker → host, just before the `Error` that answers the request
    /// with the same `id`: what the evaluation printed before it failed
    /// (capped like any output), for the package's author.
    Output {
        /// The request's id.
        id: u64,
        /// The captured output.
        output: String,
    },
    /// Host → worker: abandon the request with this id.
    Cancel {
        /// The request to cancel.
        id: u64,
    },
}

/// A protocol violation or transport failure. Always terminal for the
/// connection.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// Reading or writing the pipe failed.
    #[error("worker pipe I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection between frames.
    #[error("the worker closed the connection")]
    Closed,
    /// A frame is longer than the maximum.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    Oversize {
        /// Announced or encoded length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The connection ended inside a frame.
    #[error("truncated frame: expected {expected} bytes, got {got}")]
    Truncated {
        /// Bytes announced.
        expected: usize,
        /// Bytes received.
        got: usize,
    },
    /// The frame is not a valid message.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// A valid message arrived where the protocol does not allow it.
    #[error("unsolicited message: {0}")]
    Unsolicited(String),
    /// The peers share no protocol version.
    #[error(
        "protocol version mismatch: worker speaks {min}..={max}, host speaks {PROTOCOL_VERSION}"
    )]
    Version {
        /// Worker's lowest version.
        min: u32,
        /// Worker's highest version.
        max: u32,
    },
}

/// Encodes a message as one frame (length prefix included).
pub fn encode_frame(msg: &Message, max: usize) -> Result<Vec<u8>, ProtocolError> {
    let body = serde_json::to_vec(msg).map_err(|e| ProtocolError::Malformed(e.to_string()))?;
    if body.len() > max {
        return Err(ProtocolError::Oversize {
            len: body.len(),
            max,
        });
    }
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Decodes a frame body (without the length prefix).
pub fn decode_body(body: &[u8]) -> Result<Message, ProtocolError> {
    serde_json::from_slice(body).map_err(|e| ProtocolError::Malformed(e.to_string()))
}

/// Decodes every complete frame in `buf`, stopping at the first error.
/// Returns the messages and the number of bytes consumed. For fuzzing and
/// tests; the streaming readers below share the same checks.
pub fn decode_frames(mut buf: &[u8], max: usize) -> (Vec<Message>, Result<usize, ProtocolError>) {
    let mut out = Vec::new();
    let mut used = 0;
    while buf.len() >= 4 {
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len > max {
            return (out, Err(ProtocolError::Oversize { len, max }));
        }
        if buf.len() - 4 < len {
            return (
                out,
                Err(ProtocolError::Truncated {
                    expected: len,
                    got: buf.len() - 4,
                }),
            );
        }
        match decode_body(&buf[4..4 + len]) {
            Ok(m) => out.push(m),
            Err(e) => return (out, Err(e)),
        }
        used += 4 + len;
        buf = &buf[4 + len..];
    }
    (out, Ok(used))
}

fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> Result<usize, std::io::Error> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads one message from a blocking reader (the worker side).
pub fn read_message<R: Read>(r: &mut R, max: usize) -> Result<Message, ProtocolError> {
    let mut len = [0u8; 4];
    match read_full(r, &mut len)? {
        0 => return Err(ProtocolError::Closed),
        4 => {}
        got => return Err(ProtocolError::Truncated { expected: 4, got }),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(ProtocolError::Oversize { len, max });
    }
    let mut body = vec![0u8; len];
    let got = read_full(r, &mut body)?;
    if got < len {
        return Err(ProtocolError::Truncated { expected: len, got });
    }
    decode_body(&body)
}

/// Writes one message to a blocking writer and flushes it.
pub fn write_message<W: Write>(w: &mut W, msg: &Message, max: usize) -> Result<(), ProtocolError> {
    let frame = encode_frame(msg, max)?;
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Reads one message from an async reader (the host side).
pub async fn read_message_async<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Message, ProtocolError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = r.read(&mut len[got..]).await?;
        if n == 0 {
            return Err(if got == 0 {
                ProtocolError::Closed
            } else {
                ProtocolError::Truncated { expected: 4, got }
            });
        }
        got += n;
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(ProtocolError::Oversize { len, max });
    }
    let mut body = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let n = r.read(&mut body[got..]).await?;
        if n == 0 {
            return Err(ProtocolError::Truncated { expected: len, got });
        }
        got += n;
    }
    decode_body(&body)
}

/// Writes one message to an async writer and flushes it.
pub async fn write_message_async<W: AsyncWrite + Unpin>(
    w: &mut W,
    msg: &Message,
    max: usize,
) -> Result<(), ProtocolError> {
    let frame = encode_frame(msg, max)?;
    w.write_all(&frame).await?;
    w.flush().await?;
    Ok(())
}

/// Checks a worker's `Hello` and picks the version.
pub fn negotiate(hello: &Message, expected_instance: &str) -> Result<u32, ProtocolError> {
    match hello {
        Message::Hello {
            protocol_min,
            protocol_max,
            instance_id,
            ..
        } => {
            if instance_id != expected_instance {
                return Err(ProtocolError::Unsolicited(format!(
                    "hello from instance `{instance_id}`, expected `{expected_instance}`"
                )));
            }
            if (*protocol_min..=*protocol_max).contains(&PROTOCOL_VERSION) {
                Ok(PROTOCOL_VERSION)
            } else {
                Err(ProtocolError::Version {
                    min: *protocol_min,
                    max: *protocol_max,
                })
            }
        }
        other => Err(ProtocolError::Unsolicited(format!(
            "expected hello, got {other:?}"
        ))),
    }
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: u64) -> Message {
        Message::Request {
            id,
            method: "call".into(),
            body: serde_json::json!({"entry": "main", "n": 1.5, "big": u64::MAX}),
        }
    }

    #[test]
    fn round_trip_sync_and_stream() {
        let mut buf = Vec::new();
        write_message(&mut buf, &req(1), DEFAULT_MAX_FRAME).unwrap();
        write_message(&mut buf, &Message::Cancel { id: 1 }, DEFAULT_MAX_FRAME).unwrap();
        let mut r = &buf[..];
        assert_eq!(read_message(&mut r, DEFAULT_MAX_FRAME).unwrap(), req(1));
        assert_eq!(
            read_message(&mut r, DEFAULT_MAX_FRAME).unwrap(),
            Message::Cancel { id: 1 }
        );
        assert!(matches!(
            read_message(&mut r, DEFAULT_MAX_FRAME),
            Err(ProtocolError::Closed)
        ));
    }

    #[test]
    fn oversize_refused_on_write_and_read() {
        let big = Message::Request {
            id: 1,
            method: "x".into(),
            body: serde_json::Value::String("a".repeat(100)),
        };
        assert!(matches!(
            encode_frame(&big, 50),
            Err(ProtocolError::Oversize { .. })
        ));
        let frame = encode_frame(&big, 1000).unwrap();
        assert!(matches!(
            read_message(&mut &frame[..], 50),
            Err(ProtocolError::Oversize { .. })
        ));
    }

    #[test]
    fn garbage_and_truncation_are_errors() {
        let mut g = 5u32.to_be_bytes().to_vec();
        g.extend_from_slice(b"nope!");
        assert!(matches!(
            read_message(&mut &g[..], 100),
            Err(ProtocolError::Malformed(_))
        ));
        let frame = encode_frame(&req(2), 1000).unwrap();
        assert!(matches!(
            read_message(&mut &frame[..frame.len() - 3], 1000),
            Err(ProtocolError::Truncated { .. })
        ));
        assert!(matches!(
            read_message(&mut &frame[..2], 1000),
            Err(ProtocolError::Truncated {
                expected: 4,
                got: 2
            })
        ));
        let unknown = br#"{"launch_missiles":{}}"#;
        let mut f = (unknown.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(unknown);
        assert!(read_message(&mut &f[..], 1000).is_err());
    }

    #[test]
    fn negotiation() {
        let hello = |min, max| Message::Hello {
            protocol_min: min,
            protocol_max: max,
            worker: "w".into(),
            instance_id: "i".into(),
        };
        assert_eq!(negotiate(&hello(1, 3), "i").unwrap(), 1);
        assert!(matches!(
            negotiate(&hello(2, 3), "i"),
            Err(ProtocolError::Version { .. })
        ));
        assert!(negotiate(&hello(1, 1), "other").is_err());
        assert!(negotiate(&Message::Cancel { id: 1 }, "i").is_err());
    }
}
