//! The hosts a libpq connection string names, one attempt each: libpq gives each host of a
//! multi-host string (`host=a,b port=5432,5433`) its own `connect_timeout`, but a caller that
//! connects without blocking (`PQconnectPoll`) has only its own deadline, which a first host that
//! never answers (a black hole: a powered-off leader behind a live address, a partition that drops
//! packets) would spend whole. So the caller tries the hosts one by one, each with the deadline
//! libpq would give it; these are the rules for splitting the lists as libpq does.

/// One host of the list: its `host`, `hostaddr` and `port` entries (empty: libpq's default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub host: String,
    pub hostaddr: String,
    pub port: String,
}

/// The hosts of a connection string's `host`, `hostaddr` and `port` values (each possibly a
/// comma-separated list), in order, as libpq pairs them: `host` and `hostaddr`, where both are
/// lists, have one entry per host; `port` has one, which every host uses, or one per host. None
/// where the lists do not pair up (libpq then refuses the string, and says why) or where there is
/// at most one host (nothing to split).
pub fn split(host: Option<&str>, hostaddr: Option<&str>, port: Option<&str>) -> Option<Vec<Host>> {
    let list = |v: Option<&str>| -> Vec<String> {
        match v {
            Some(v) if !v.is_empty() => v.split(',').map(|e| e.trim().to_string()).collect(),
            _ => Vec::new(),
        }
    };
    let (hosts, addrs, ports) = (list(host), list(hostaddr), list(port));
    let n = hosts.len().max(addrs.len());
    if n < 2 || (!hosts.is_empty() && !addrs.is_empty() && hosts.len() != addrs.len()) {
        return None;
    }
    if ports.len() > 1 && ports.len() != n {
        return None;
    }
    let at = |v: &Vec<String>, i: usize| match v.len() {
        0 => String::new(),
        1 => v[0].clone(),
        _ => v[i].clone(),
    };
    Some(
        (0..n)
            .map(|i| Host {
                host: if hosts.is_empty() {
                    String::new()
                } else {
                    hosts[i].clone()
                },
                hostaddr: if addrs.is_empty() {
                    String::new()
                } else {
                    addrs[i].clone()
                },
                port: at(&ports, i),
            })
            .collect(),
    )
}

/// The deadline libpq gives one host under `connect_timeout` (whole seconds): none where it is
/// unset, zero, negative or not a number (libpq waits for ever then; the caller keeps its own),
/// and at least 2 s, as libpq rounds 1 up to 2.
pub fn connect_timeout_s(value: Option<&str>) -> Option<u64> {
    match value?.trim().parse::<i64>() {
        Ok(s) if s > 0 => Some(s.max(2) as u64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(host: &str, hostaddr: &str, port: &str) -> Host {
        Host {
            host: host.into(),
            hostaddr: hostaddr.into(),
            port: port.into(),
        }
    }

    #[test]
    fn two_hosts_with_a_port_each_are_two_attempts_in_order() {
        assert_eq!(
            split(Some("10.0.0.1,10.0.0.2"), None, Some("5432,5433")),
            Some(vec![h("10.0.0.1", "", "5432"), h("10.0.0.2", "", "5433")])
        );
    }

    #[test]
    fn one_port_serves_every_host_and_hostaddr_pairs_with_host() {
        assert_eq!(
            split(
                Some("a,b,c"),
                Some("127.0.0.1,127.0.0.2,127.0.0.3"),
                Some("6000")
            ),
            Some(vec![
                h("a", "127.0.0.1", "6000"),
                h("b", "127.0.0.2", "6000"),
                h("c", "127.0.0.3", "6000")
            ])
        );
        assert_eq!(
            split(None, Some("127.0.0.1,127.0.0.2"), None),
            Some(vec![h("", "127.0.0.1", ""), h("", "127.0.0.2", "")])
        );
        // an empty entry is libpq's default for that host
        assert_eq!(
            split(Some("a,"), None, Some(",5433")),
            Some(vec![h("a", "", ""), h("", "", "5433")])
        );
    }

    #[test]
    fn one_host_or_lists_that_do_not_pair_up_are_left_to_libpq() {
        assert_eq!(split(Some("a"), None, Some("5432")), None);
        assert_eq!(split(None, None, None), None);
        assert_eq!(split(Some("a,b"), None, Some("1,2,3")), None);
        assert_eq!(split(Some("a,b"), Some("127.0.0.1"), None), None);
    }

    #[test]
    fn connect_timeout_is_whole_seconds_at_least_two_or_none() {
        assert_eq!(connect_timeout_s(Some("5")), Some(5));
        assert_eq!(connect_timeout_s(Some("1")), Some(2));
        assert_eq!(connect_timeout_s(Some("0")), None);
        assert_eq!(connect_timeout_s(Some("-3")), None);
        assert_eq!(connect_timeout_s(Some("soon")), None);
        assert_eq!(connect_timeout_s(None), None);
    }
}
