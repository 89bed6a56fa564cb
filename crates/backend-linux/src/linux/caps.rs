//! No capabilities, and no way to gain any through exec: the ambient set
//! cleared, every capability dropped from the bounding set, the permitted,
//! effective and inheritable sets emptied (`capset`), and
//! `PR_SET_NO_NEW_PRIVS`. The `caps` crate is not used: it allocates, and
//! this runs between the launch and the exec.

use super::sys::check_long;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// When the bounding set is emptied: it takes `CAP_SETPCAP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bounding {
    /// With the rest ([`drop_all`]): in tier namespaces the launcher holds
    /// every capability of the sandbox's user namespace.
    WithTheRest,
    /// Before the uid changes ([`drop_bounding`], a root host in tier
    /// landlock: as the sandbox's uid it holds no capability at all).
    BeforeCredentials,
    /// Never: an unprivileged host in tier landlock holds no
    /// `CAP_SETPCAP`. `no_new_privs` then keeps every exec from raising
    /// its capabilities above the empty permitted set (commoncap's
    /// `cap_bprm_creds_from_file`), which is what the bounding set is
    /// for; the gate reports the full set as given up.
    CannotDrop,
}

/// Empties the bounding set up to `last_cap` (the running kernel's, read
/// in the parent). Async-signal-safe.
pub(crate) fn drop_bounding(last_cap: libc::c_ulong) -> std::io::Result<()> {
    let mut cap: libc::c_ulong = 0;
    while cap <= last_cap {
        // SAFETY: prctl on integers.
        check_long(unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) }.into())?;
        cap += 1;
    }
    Ok(())
}

/// Drops every capability up to `last_cap`: the ambient set, the
/// bounding set when `bounding` says so now, then the permitted,
/// effective and inheritable sets. Async-signal-safe.
pub(crate) fn drop_all(last_cap: libc::c_ulong, bounding: Bounding) -> std::io::Result<()> {
    // SAFETY: prctl on integers; capset reads the header and two data
    // structs on this frame.
    unsafe {
        check_long(
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                0,
                0,
                0,
            )
            .into(),
        )?;
        if bounding == Bounding::WithTheRest {
            drop_bounding(last_cap)?;
        }
        let header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        check_long(libc::syscall(
            libc::SYS_capset,
            &header as *const CapHeader,
            data.as_ptr(),
        ))
    }
}

/// `PR_SET_NO_NEW_PRIVS`: no setuid bit or file capability is honoured by
/// any exec from here on. Async-signal-safe.
pub(crate) fn no_new_privs() -> std::io::Result<()> {
    // SAFETY: prctl on integers.
    check_long(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }.into())
}
