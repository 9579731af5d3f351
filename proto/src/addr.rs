//! Addresses as operators write them: `host:port`, where the host is a DNS
//! name, an IPv4 address or a bracketed IPv6 address.

/// The host part of `addr`, without the port and without the brackets of an
/// IPv6 address: the name a TLS certificate must carry. An address without a
/// port is taken whole.
pub fn host_of(addr: &str) -> &str {
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => addr,
    };
    host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_the_address_without_port_and_brackets() {
        assert_eq!(host_of("plaudit-0.plaudit.ns.svc:7401"), "plaudit-0.plaudit.ns.svc");
        assert_eq!(host_of("127.0.0.1:7401"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7401"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
        // A bare IPv6 address has colons but no port to drop.
        assert_eq!(host_of("[::1]"), "::1");
    }
}
