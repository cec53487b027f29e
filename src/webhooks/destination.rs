//! Where deliveries may go (`webhooks.allow_http`, `allow_private_networks`, `allowed_hosts`): checked when a subscription is made, before each attempt, and at each connection by the client's resolver (a name that resolves somewhere else tomorrow is checked again).
use super::lookup::{self, LookupError, LookupFor};
use crate::domain::WebhookUrl;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

/// The destination rules of the configuration.
#[derive(Debug, Clone, Default)]
pub struct Destinations {
    pub allow_http: bool,
    pub allow_private_networks: bool,
    /// Lowercase host names; `*.example.com` allows every name under `example.com`. Empty:
    /// any host.
    pub allowed_hosts: Vec<String>,
}

/// Why a destination is refused (said in the 422 and in the deliveries log).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Why a destination cannot be taken now: a rule refuses it, or its name could not be looked
/// up for want of a turn (others' lookups hold them: try again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error("the name lookups for webhook destinations are busy")]
    Busy,
}

impl Destinations {
    /// The rules `[webhooks]` sets.
    pub fn from_config(config: &crate::config::WebhooksConfig) -> Self {
        Destinations {
            allow_http: config.allow_http,
            allow_private_networks: config.allow_private_networks,
            allowed_hosts: config.allowed_hosts.clone(),
        }
    }

    /// The rules a URL can be held to without resolving it: its scheme, its host against
    /// `allowed_hosts`, and an address written in it.
    pub fn check_url(&self, url: &WebhookUrl) -> Result<(), Refused> {
        let url = url.url();
        if url.scheme() != "https" && !self.allow_http {
            return Err(Refused(
                "only https:// destinations are allowed (webhooks.allow_http is false)".into(),
            ));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => d.to_ascii_lowercase(),
            Some(url::Host::Ipv4(ip)) => return self.check_literal(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => return self.check_literal(IpAddr::V6(ip)),
            None => return Err(Refused("the URL names no host".into())),
        };
        if !self.host_allowed(&host) {
            return Err(Refused(format!(
                "the host {host} is not in webhooks.allowed_hosts"
            )));
        }
        Ok(())
    }

    /// The URL's rules, then every address its host resolves to now (at creation: a name
    /// that resolves only to refused addresses is refused; one that does not resolve is too).
    pub async fn check_resolved(&self, url: &WebhookUrl) -> Result<(), CheckError> {
        self.check_url(url)?;
        let Some(url::Host::Domain(host)) = url.url().host() else {
            return Ok(());
        };
        let port = url.url().port_or_known_default().unwrap_or(443);
        let addrs = match lookup::lookup(host, port, LookupFor::Creation, None).await {
            Ok(addrs) => addrs,
            Err(LookupError::Busy) => return Err(CheckError::Busy),
            Err(LookupError::Failed(why)) => return Err(Refused(why).into()),
        };
        Ok(self.allowed_addrs(host, addrs).map(drop)?)
    }

    /// An address written in the URL: with `allowed_hosts`, only one listed as it is.
    fn check_literal(&self, ip: IpAddr) -> Result<(), Refused> {
        if !self.allowed_hosts.is_empty()
            && !self
                .allowed_hosts
                .iter()
                .any(|h| h.trim_matches(['[', ']']) == ip.to_string())
        {
            return Err(Refused(format!(
                "the address {ip} is not in webhooks.allowed_hosts"
            )));
        }
        self.check_ip(ip)
    }

    /// Whether an address may be connected to.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Refused> {
        if self.allow_private_networks || is_public(ip) {
            Ok(())
        } else {
            Err(Refused(format!(
                "{ip} is in a private, loopback, link-local or reserved range (webhooks.allow_private_networks is false)"
            )))
        }
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.allowed_hosts.is_empty()
            || self
                .allowed_hosts
                .iter()
                .any(|allowed| match allowed.strip_prefix("*.") {
                    Some(parent) => host
                        .strip_suffix(parent)
                        .is_some_and(|head| head.ends_with('.') && head.len() > 1),
                    None => allowed == host,
                })
    }

    /// The addresses of `host` that may be connected to; refused when none may.
    fn allowed_addrs(
        &self,
        host: &str,
        addrs: Vec<SocketAddr>,
    ) -> Result<Vec<SocketAddr>, Refused> {
        let mut first_refusal = None;
        let allowed: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| match self.check_ip(a.ip()) {
                Ok(()) => true,
                Err(e) => {
                    first_refusal.get_or_insert(e);
                    false
                }
            })
            .collect();
        match (allowed.is_empty(), first_refusal) {
            (false, _) => Ok(allowed),
            (true, Some(Refused(why))) => {
                // The address itself is the operator's business (a tenant could map the
                // service's internal names with it): logged, not answered.
                tracing::info!(%host, refused = %why, "a webhook destination resolves only to refused addresses");
                Err(Refused(format!(
                    "{host} resolves only to addresses in private, loopback, link-local or reserved ranges (webhooks.allow_private_networks is false)"
                )))
            }
            (true, None) => Err(Refused(format!("{host} resolves to no address"))),
        }
    }

    /// The client's resolver: each connection goes only to addresses checked here.
    pub fn resolver(self: &Arc<Self>) -> Arc<CheckedResolver> {
        Arc::new(CheckedResolver(self.clone()))
    }
}

/// A reqwest resolver that drops the addresses the rules refuse.
pub struct CheckedResolver(Arc<Destinations>);

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let rules = self.0.clone();
        // Read now, on the attempt's task: the connection may be finished on another.
        let share = lookup::current_share();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs = match lookup::lookup(&host, 0, LookupFor::Delivery, share).await {
                Ok(addrs) => addrs,
                Err(LookupError::Failed(why)) => return Err(Box::new(Refused(why)) as _),
                Err(busy) => return Err(Box::new(busy) as _),
            };
            let allowed = rules.allowed_addrs(&host, addrs)?;
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Not private, loopback, link-local, shared (CGNAT), multicast, documentation or otherwise
/// reserved. An IPv4 address carried inside IPv6 is judged as the IPv4 address: mapped,
/// NAT64's well-known prefix, 6to4 (`2002::/16`) and both of Teredo's (`2001::/32`: the server
/// and the client, whose bits are inverted). NAT64's local-use prefix (`64:ff9b:1::/48`)
/// reaches whatever its local translator reaches: refused.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            let s = v6.segments();
            let v4 = |hi: u16, lo: u16| {
                let [a, b] = hi.to_be_bytes();
                let [c, d] = lo.to_be_bytes();
                Ipv4Addr::new(a, b, c, d)
            };
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                return is_public_v4(v4(s[6], s[7]));
            }
            if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
                return false;
            }
            if s[0] == 0x2002 {
                return is_public_v4(v4(s[1], s[2]));
            }
            if s[0] == 0x2001 && s[1] == 0 {
                return is_public_v4(v4(s[2], s[3])) && is_public_v4(v4(!s[6], !s[7]));
            }
            !(v6.is_unspecified()
                || (s[0] == 0x100 && s[1..4] == [0, 0, 0]) // discard-only
                || v6.is_loopback()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || s[0..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible (deprecated)
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || a == 0
        || ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || (a == 100 && (b & 0xc0) == 64) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b & 0xfe) == 18) // benchmarking
        || a >= 240) // reserved
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> WebhookUrl {
        WebhookUrl::parse(s).unwrap()
    }

    #[test]
    fn private_loopback_and_reserved_addresses_are_refused_by_default() {
        let rules = Destinations::default();
        for refused in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2001:db8::1",
            // NAT64 local use, whatever follows it; 6to4 and Teredo of private addresses.
            "64:ff9b:1::7f00:1",
            "64:ff9b:1:ffff::808:808",
            "2002:7f00:1::",
            "2002:a00:1::1",
            "2001:0:7f00:1::1",
            "2001:0:808:808::80ff:fefe",
            "100::1",
        ] {
            let ip: IpAddr = refused.parse().unwrap();
            assert!(rules.check_ip(ip).is_err(), "{refused}");
        }
        for public in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "64:ff9b::101:101",
            "2002:808:808::1",
            // Teredo: server 8.8.8.8, client 1.1.1.1 (stored inverted: fefe:fefe).
            "2001:0:808:808::fefe:fefe",
        ] {
            let ip: IpAddr = public.parse().unwrap();
            assert!(rules.check_ip(ip).is_ok(), "{public}");
        }
        let open = Destinations {
            allow_private_networks: true,
            ..Destinations::default()
        };
        assert!(open.check_ip("127.0.0.1".parse().unwrap()).is_ok());
    }

    #[test]
    fn urls_are_held_to_scheme_hosts_and_written_addresses() {
        let rules = Destinations {
            allowed_hosts: vec!["hooks.example.com".into(), "*.ci.example.org".into()],
            ..Destinations::default()
        };
        assert!(rules.check_url(&url("https://hooks.example.com/x")).is_ok());
        assert!(rules.check_url(&url("https://HOOKS.example.com/x")).is_ok());
        assert!(rules.check_url(&url("https://a.ci.example.org/x")).is_ok());
        for refused in [
            "http://hooks.example.com/x",
            "https://ci.example.org/x",
            "https://evil-ci.example.org/x",
            "https://hooks.example.com.evil.net/x",
            "https://127.0.0.1/x",
            "https://[::1]/x",
            // Public, but not listed: allowed_hosts holds for addresses too.
            "https://93.184.216.34/x",
        ] {
            assert!(rules.check_url(&url(refused)).is_err(), "{refused}");
        }
        let http = Destinations {
            allow_http: true,
            ..Destinations::default()
        };
        assert!(http.check_url(&url("http://hooks.example.com/x")).is_ok());
    }

    #[tokio::test]
    async fn a_name_is_checked_by_what_it_resolves_to() {
        let rules = Destinations::default();
        let refused = rules
            .check_resolved(&url("https://localhost:9/x"))
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("localhost resolves only to"),
            "{refused}"
        );
        assert!(
            !refused.to_string().contains("127.0.0.1"),
            "no address answered: {refused}"
        );
        let open = Destinations {
            allow_private_networks: true,
            ..Destinations::default()
        };
        open.check_resolved(&url("https://localhost:9/x"))
            .await
            .unwrap();
    }
}
