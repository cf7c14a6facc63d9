//! Tenant bindings: which tenants a data-plane caller may act for (docs/SECURITY.md, "Tenant
//! bindings").
//!
//! A `[[client_tokens]]` entry with `tenants = [...]` binds its token: [`super::Authenticated`]
//! puts its [`TenantBinding`] into the request's extensions beside the caller identity, and
//! the handlers of the RPCs that name a tenant (synthesis's `tenant` field, every jobs RPC)
//! read it with [`tenant_binding`]. A caller without a binding (a token without `tenants`, a
//! client certificate, or a server that authenticates no one) acts for any tenant, as before
//! bindings existed. A refusal is PERMISSION_DENIED with the typed reason
//! [`AuthReason::TenantNotAllowed`], naming the caller, the tenant and the entry to change.

use std::{collections::HashMap, fmt, sync::Arc};

use tonic::{Code, Status};
use voxpool_domain::{contract::AuthReason, status::with_info, untrusted::quote};

/// The tenants the caller of a request may act for: those of its `[[client_tokens]]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantBinding {
    /// The entry's name (the caller is `token:<name>`).
    token: String,
    /// At least one tenant (the config refuses an empty list).
    tenants: Arc<[String]>,
}

/// The binding of `req`'s caller, or `None` when it may act for any tenant (module doc).
pub fn tenant_binding<T>(req: &tonic::Request<T>) -> Option<&TenantBinding> {
    req.extensions().get::<TenantBinding>()
}

/// The tenant a request naming `requested` acts for: [`TenantBinding::resolve`] when the
/// caller is bound, `requested` unchanged when it is not.
pub fn resolve_tenant(
    binding: Option<&TenantBinding>,
    requested: String,
) -> Result<String, Status> {
    match binding {
        Some(binding) => binding.resolve(&requested),
        None => Ok(requested),
    }
}

impl TenantBinding {
    /// The binding of the `[[client_tokens]]` entry `token` to `tenants`.
    pub fn new(token: impl Into<String>, tenants: impl Into<Arc<[String]>>) -> Self {
        Self {
            token: token.into(),
            tenants: tenants.into(),
        }
    }

    /// The tenants the caller may act for.
    pub fn tenants(&self) -> &[String] {
        &self.tenants
    }

    /// True when the caller may act for `tenant`.
    pub fn allows(&self, tenant: &str) -> bool {
        self.tenants.iter().any(|t| t == tenant)
    }

    /// The tenant a request naming `requested` acts for: `requested` when the caller is bound
    /// to it; the caller's one tenant when `requested` is empty and it is bound to exactly one.
    /// Errors: PERMISSION_DENIED `TENANT_NOT_ALLOWED` for any other tenant (the empty one, the
    /// shared tenant, included), naming the caller, the tenant and what to change.
    pub fn resolve(&self, requested: &str) -> Result<String, Status> {
        match &*self.tenants {
            [only] if requested.is_empty() => Ok(only.clone()),
            _ if self.allows(requested) => Ok(requested.to_owned()),
            _ if requested.is_empty() => Err(self.refuse(
                requested,
                format!(
                    "tenant is empty (the shared tenant), and token:{} may act for {} only: name one of them in tenant",
                    self.token,
                    self.listed()
                ),
            )),
            _ => Err(self.refuse(
                requested,
                format!(
                    "token:{} may not act for tenant {}: it may act for {} only; send one of those, or add the tenant to the tenants of [[client_tokens]] entry {:?}",
                    self.token,
                    quote(requested),
                    self.listed(),
                    self.token
                ),
            )),
        }
    }

    /// Checks that the caller may act on `what` (such as `jobs/j1f…`), which belongs to
    /// `tenant`. Errors: PERMISSION_DENIED `TENANT_NOT_ALLOWED` naming `what`, its tenant, the
    /// caller and what to change.
    pub fn check(&self, what: &str, tenant: &str) -> Result<(), Status> {
        if self.allows(tenant) {
            return Ok(());
        }
        Err(self.refuse(
            tenant,
            format!(
                "{what} belongs to tenant {}, and token:{} may act for {} only: use a token of that tenant, or add it to the tenants of [[client_tokens]] entry {:?}",
                quote(tenant),
                self.token,
                self.listed(),
                self.token
            ),
        ))
    }

    /// `"a", "b"` (each quoted; a few at most, then how many more).
    fn listed(&self) -> Listed<'_> {
        Listed(&self.tenants)
    }

    /// The refusal of `tenant` with `message`; logged (caller and tenant, escaped), with the
    /// tenant and caller as `ErrorInfo` metadata.
    fn refuse(&self, tenant: &str, message: String) -> Status {
        let caller = format!("token:{}", self.token);
        tracing::info!(%caller, tenant = %quote(tenant), "refused a tenant outside the caller's binding");
        let mut metadata = HashMap::from([("caller".to_owned(), caller)]);
        if voxpool_domain::contract::check_tenant(tenant).is_ok() {
            metadata.insert("tenant".to_owned(), tenant.to_owned());
        }
        with_info(
            Code::PermissionDenied,
            message,
            AuthReason::TenantNotAllowed.as_str(),
            metadata,
            None,
        )
    }
}

/// The tenants of a binding as a message shows them.
struct Listed<'a>(&'a [String]);

impl fmt::Display for Listed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 8;
        let word = if self.0.len() == 1 {
            "tenant"
        } else {
            "tenants"
        };
        write!(f, "{word} ")?;
        for (i, tenant) in self.0.iter().take(SHOWN).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{tenant:?}")?;
        }
        if self.0.len() > SHOWN {
            write!(f, " and {} more", self.0.len() - SHOWN)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tonic_types::StatusExt as _;

    use super::*;

    fn bound(tenants: &[&str]) -> TenantBinding {
        let tenants: Vec<String> = tenants.iter().map(|t| (*t).to_owned()).collect();
        TenantBinding::new("apps", tenants)
    }

    fn assert_refused(status: &Status, says: &[&str]) {
        assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
        assert_eq!(
            AuthReason::of(status),
            Some(AuthReason::TenantNotAllowed),
            "{status:?}"
        );
        for part in says {
            assert!(status.message().contains(part), "{part:?} in {status:?}");
        }
    }

    #[test]
    fn a_bound_caller_acts_for_its_tenants_and_an_empty_one_is_its_only_tenant() {
        let one = bound(&["team-a"]);
        assert_eq!(one.resolve("team-a").ok().as_deref(), Some("team-a"));
        assert_eq!(one.resolve("").ok().as_deref(), Some("team-a"));
        let two = bound(&["team-a", "team-b"]);
        assert_eq!(two.resolve("team-b").ok().as_deref(), Some("team-b"));
        let shared = two.resolve("").unwrap_err();
        assert_refused(
            &shared,
            &["token:apps", "\"team-a\", \"team-b\"", "name one"],
        );
        assert!(two.check("jobs/j1", "team-b").is_ok());
        assert_eq!(
            resolve_tenant(None, "anyone".into()).ok().as_deref(),
            Some("anyone"),
            "unbound: any tenant"
        );
    }

    #[test]
    fn a_foreign_tenant_is_permission_denied_naming_caller_tenant_and_entry() {
        let one = bound(&["team-a"]);
        let e = one.resolve("team-b").unwrap_err();
        assert_refused(
            &e,
            &[
                "token:apps",
                "\"team-b\"",
                "tenant \"team-a\" only",
                "[[client_tokens]] entry \"apps\"",
            ],
        );
        let info = e.get_details_error_info().expect("ErrorInfo");
        assert_eq!(
            info.metadata.get("tenant").map(String::as_str),
            Some("team-b")
        );
        assert_eq!(
            info.metadata.get("caller").map(String::as_str),
            Some("token:apps")
        );
        let e = one.check("jobs/j1", "team-b").unwrap_err();
        assert_refused(&e, &["jobs/j1 belongs to tenant \"team-b\"", "token:apps"]);
    }

    #[test]
    fn an_untrusted_tenant_is_escaped_and_bounded_in_the_refusal() {
        let huge = format!("evil\n{}", "x".repeat(100_000));
        let e = bound(&["team-a"]).resolve(&huge).unwrap_err();
        assert!(!e.message().contains('\n'), "{}", e.message());
        assert!(e.message().len() < 1000, "{}", e.message().len());
        let info = e.get_details_error_info().expect("ErrorInfo");
        assert!(
            !info.metadata.contains_key("tenant"),
            "not echoed as metadata"
        );
    }
}
