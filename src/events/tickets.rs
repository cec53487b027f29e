//! `Tickets`: single-use, 30-second stand-ins for a bearer token, for browsers' `EventSource`, which cannot send headers.
use crate::domain::{PlanFile, TenantId};
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a ticket can be used.
pub const TICKET_TTL: Duration = Duration::from_secs(30);

/// What a ticket allows: reading the events of these files of this tenant, until the
/// token it was issued for stops being accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub tenant: TenantId,
    pub integration: bool,
    pub configuration: bool,
    /// It may approve proposals: it sees every proposal's events.
    pub approves: bool,
    /// The token's `exp` plus the leeway: a stream on this grant ends then.
    pub valid_until: std::time::SystemTime,
}

impl Grant {
    pub fn can_read(&self, file: PlanFile) -> bool {
        match file {
            PlanFile::Integration => self.integration,
            PlanFile::Configuration => self.configuration,
        }
    }

    /// Whether a stream on this grant is sent `p`'s events (the rule of its listing).
    pub fn sees(&self, p: &crate::domain::Proposal) -> bool {
        p.visible_to(|f| self.can_read(f), self.approves)
    }
}

/// Tickets issued and not yet used or expired, at most `max` in all and `per_tenant` for one
/// tenant: a ticket is made by the server (never a key a client chooses), and the map is
/// bounded however many are asked for.
pub struct Tickets {
    map: Mutex<HashMap<String, (Grant, Instant), RandomState>>,
    max: usize,
    per_tenant: usize,
}

impl Tickets {
    pub fn new(max: usize, per_tenant: usize) -> Self {
        Self {
            map: Mutex::default(),
            max,
            per_tenant,
        }
    }

    /// A new ticket for `grant` (256 random bits from a CSPRNG, hex), or `None` when too many
    /// are outstanding.
    pub fn issue(&self, grant: Grant) -> Option<String> {
        let now = Instant::now();
        let mut map = self.map.lock().expect("not poisoned");
        if map.len() >= self.max || self.count(&map, &grant.tenant) >= self.per_tenant {
            map.retain(|_, (_, expires)| *expires > now);
        }
        if map.len() >= self.max || self.count(&map, &grant.tenant) >= self.per_tenant {
            return None;
        }
        let bytes: [u8; 32] = rand::random();
        let ticket: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        map.insert(ticket.clone(), (grant, now + TICKET_TTL));
        Some(ticket)
    }

    fn count(
        &self,
        map: &HashMap<String, (Grant, Instant), RandomState>,
        tenant: &TenantId,
    ) -> usize {
        map.values().filter(|(g, _)| &g.tenant == tenant).count()
    }

    /// The grant of `ticket`, which is used up; `None` when it is unknown, used or expired.
    pub fn redeem(&self, ticket: &str) -> Option<Grant> {
        let (grant, expires) = self.map.lock().expect("not poisoned").remove(ticket)?;
        (Instant::now() < expires).then_some(grant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(tenant: &str) -> Grant {
        Grant {
            tenant: TenantId::parse(tenant).unwrap(),
            integration: true,
            configuration: false,
            approves: false,
            valid_until: std::time::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_ticket_works_once_and_unknown_ones_never() {
        let tickets = Tickets::new(10, 10);
        let t = tickets.issue(grant("acme")).unwrap();
        assert_eq!(t.len(), 64);
        assert_ne!(tickets.issue(grant("acme")).unwrap(), t, "random");
        assert_eq!(tickets.redeem(&t), Some(grant("acme")));
        assert_eq!(tickets.redeem(&t), None, "used");
        assert_eq!(tickets.redeem("00"), None, "unknown");
    }

    #[test]
    fn outstanding_tickets_are_bounded_in_all_and_per_tenant() {
        let tickets = Tickets::new(3, 2);
        assert!(tickets.issue(grant("a")).is_some());
        assert!(tickets.issue(grant("a")).is_some());
        assert!(tickets.issue(grant("a")).is_none(), "per tenant");
        assert!(tickets.issue(grant("b")).is_some());
        assert!(tickets.issue(grant("c")).is_none(), "in all");
    }
}
