//! The address guard's classification: which addresses a name may
//! resolve to without the allowlist naming a range that holds them, and
//! what to call the others in a refusal.

use std::net::{IpAddr, Ipv4Addr};

/// True for addresses reachable without being named: not loopback,
/// private, link-local (incl. cloud metadata), CGNAT, unspecified,
/// multicast, broadcast, documentation or reserved ranges, nor an IPv6
/// form that embeds one of those IPv4 addresses.
pub fn is_public_ip(ip: IpAddr) -> bool {
    address_class(ip).is_none()
}

/// What kind of non-public address `ip` is (`"loopback"`, `"private"`,
/// `"link-local"`, …), for refusals; `None` for a public one.
pub fn address_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4_class(v4);
            }
            let seg = v6.segments();
            // NAT64 well-known prefix 64:ff9b::/96 embeds an IPv4 address.
            if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0, 0, 0, 0] {
                let v4 = Ipv4Addr::new(
                    (seg[6] >> 8) as u8,
                    seg[6] as u8,
                    (seg[7] >> 8) as u8,
                    seg[7] as u8,
                );
                return v4_class(v4);
            }
            if v6.is_loopback() {
                Some("loopback")
            } else if (seg[0] & 0xffc0) == 0xfe80 {
                Some("link-local")
            } else if (seg[0] & 0xfe00) == 0xfc00 || (seg[0] & 0xffc0) == 0xfec0 {
                // Unique local (incl. fd00:ec2::254) and deprecated site-local.
                Some("private")
            } else if v6.is_unspecified()
                || v6.is_multicast()
                || (seg[0] == 0x64 && seg[1] == 0xff9b && seg[2] == 1) // local NAT64 64:ff9b:1::/48
                || (seg[..4] == [0, 0, 0, 0] && seg[4] == 0xffff && seg[5] == 0) // SIIT ::ffff:0:0:0/96
                || (seg[0] == 0x2001 && seg[1] == 0) // Teredo 2001::/32 embeds a v4 address
                || (seg[0] == 0x2001 && seg[1] == 2 && seg[2] == 0) // benchmarking 2001:2::/48
                || (seg[0] == 0x100 && seg[1..4] == [0, 0, 0]) // discard 100::/64
                || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
                || seg[0] == 0x2002 // 6to4 may embed private v4
                || seg[..6] == [0, 0, 0, 0, 0, 0]
            // IPv4-compatible
            {
                Some("reserved")
            } else {
                None
            }
        }
    }
}

fn v4_class(v4: Ipv4Addr) -> Option<&'static str> {
    let o = v4.octets();
    if v4.is_loopback() {
        Some("loopback")
    } else if v4.is_private() {
        Some("private")
    } else if v4.is_link_local() {
        Some("link-local")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        // 100.64/10 CGNAT (Alibaba's metadata is 100.100.100.200).
        Some("shared (CGNAT)")
    } else if v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || v4.is_documentation()
        || o[0] == 0
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0/24 IETF
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18/15 benchmarking
        || o[0] >= 240
    {
        Some("reserved")
    } else {
        None
    }
}
