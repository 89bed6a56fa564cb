//! The profile generator's unit tests (escaping; the golden profiles are
//! in `tests/profile/main.rs`).

use super::*;

#[test]
fn sbpl_string_escapes_quotes_backslashes_and_controls() {
    assert_eq!(sbpl_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
    assert_eq!(sbpl_string("x\ny"), "\"x\\ny\"");
    assert_eq!(sbpl_string("\u{1}"), "\"\\x01;\"");
}

#[test]
fn constants_need_no_escaping() {
    let all = SYSTEM_READ_EXEC
        .iter()
        .chain(SYSTEM_READ_DATA)
        .chain(SYSTEM_READ_FILES)
        .chain(SYSTEM_READ_WRITE_FILES)
        .chain(SETUID_DENYLIST)
        .chain(SYSCTL_NAMES)
        .chain(SYSCTL_PREFIXES)
        .chain(MACH_SERVICES);
    for c in all {
        assert_eq!(sbpl_string(c), format!("\"{c}\""), "{c}");
    }
}
