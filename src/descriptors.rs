//! The process's file descriptors: the soft limit raised to the hard one at start, and the stream limits fitted under it with a reserve for everything else.
use crate::config::EventsConfig;

/// The descriptor limit after [`raise_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The soft limit before, and now.
    pub was: u64,
    pub now: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (systemd's default soft limit, 1024, is
/// far below what thousands of streams need); returns the limit before and after. When it
/// cannot be read or raised, the soft limit stays as it is.
pub fn raise_limit() -> std::io::Result<Limit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let was = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit; raising the soft limit up to the hard one needs
        // no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        } else {
            let e = std::io::Error::last_os_error();
            tracing::warn!(error = %e, soft = was, hard = limit.rlim_max, "cannot raise the descriptor limit");
        }
    }
    Ok(Limit {
        was,
        now: limit.rlim_cur,
    })
}

/// Descriptors kept for everything but event streams: repositories and their packs, lock
/// files, `git upload-pack` pipes, inotify, the listening socket and ordinary connections. A
/// quarter of the limit, at least 256.
pub fn reserve(limit: u64) -> u64 {
    (limit / 4).max(256)
}

/// Pack files libgit2 may keep open at once, across every repository: a quarter of the
/// reserve (64 at the smallest). The 128 repositories kept open (64 for writes, 64 for reads)
/// with 8 packs each would otherwise hold 1,024 descriptors, four times the smallest reserve;
/// past the cap libgit2 closes the
/// packs it used least recently, and opens them again when needed.
pub fn pack_files(limit: u64) -> usize {
    usize::try_from(reserve(limit) / 4).unwrap_or(usize::MAX)
}

/// The stream limits fitted under `limit` descriptors: when `limit - reserve(limit)` cannot
/// hold `max_streams` streams and held requests (one connection each), that is the limit, and
/// one tenant gets at most half of it; limits that fit stay as configured. A stream past them
/// is answered 503 `busy`, so an open descriptor is never what another request fails on.
pub fn fit(config: &EventsConfig, limit: u64) -> EventsConfig {
    let room = usize::try_from(limit.saturating_sub(reserve(limit))).unwrap_or(usize::MAX);
    if config.max_streams <= room {
        return config.clone();
    }
    let max_streams = room.max(1);
    let per_tenant = config.max_streams_per_tenant.min((max_streams / 2).max(1));
    EventsConfig {
        max_streams,
        max_streams_per_tenant: per_tenant,
        ..config.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_fit_under_the_limit_with_a_reserve() {
        let config = EventsConfig::default();
        assert_eq!(
            (config.max_streams, config.max_streams_per_tenant),
            (10_000, 1_000)
        );
        for (limit, streams, per_tenant) in [
            (1_024, 768, 384),
            (4_096, 3_072, 1_000),
            (65_536, 10_000, 1_000),
            (300, 44, 22),
            (100, 1, 1),
        ] {
            let fitted = fit(&config, limit);
            assert_eq!(
                (fitted.max_streams, fitted.max_streams_per_tenant),
                (streams, per_tenant),
                "limit {limit}"
            );
            assert!(fitted.max_streams as u64 + reserve(limit) <= limit.max(257));
        }
        // Limits that fit are kept as configured, a tenant's share included.
        let small = EventsConfig {
            max_streams: 3,
            max_streams_per_tenant: 3,
            ..EventsConfig::default()
        };
        assert_eq!(fit(&small, 1_024), small);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let limit = raise_limit().unwrap();
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as in raise_limit.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut now) }, 0);
        assert_eq!(limit.now, now.rlim_cur);
        assert_eq!(now.rlim_cur, now.rlim_max);
        assert!(limit.was <= limit.now);
    }
}
