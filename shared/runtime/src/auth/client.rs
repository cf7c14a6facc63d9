//! Data-plane callers: who may call Acquire, Report, Synthesize and the other non-admin RPCs.
//!
//! A service authenticates its callers when configured to: by a service bearer token listed in
//! the config's `[[client_tokens]]` (`authorization: Bearer <token>`, parsed as admin tokens
//! are: one entry, case-insensitive scheme), and/or by a client certificate verified against
//! `--tls-client-ca` during the TLS handshake. Either one suffices; a token that is presented
//! must be a known one, even on a connection with a good certificate. Tokens are kept as their
//! SHA-256 digests and compared in constant time against every accepted digest.
//!
//! The caller's [`CallerIdentity`] (`token:<name>` or `mtls:CN=<common name>`, never the
//! secret) goes into the request's extensions, where handlers read it with
//! [`caller_identity`], and into the RPC's `grpc.server` span as `caller`; a token whose entry
//! has `tenants` adds its [`TenantBinding`] there too. With nothing configured every call is
//! let through and carries no identity.

use std::{fmt, path::Path, sync::Arc};

use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;
use tonic::{
    Status,
    metadata::{Ascii, MetadataValue},
};

use voxpool_config::{ClientTokenConfig, DataPlane};
use voxpool_domain::{contract::AuthReason, secret::Secret};

use super::{BearerError, MIN_TOKEN_CHARS, TenantBinding, bearer_token};

/// Who made a data-plane call: `token:<name>` (a `[[client_tokens]]` entry) or
/// `mtls:CN=<common name>` (also `mtls:DNS=…`, `mtls:URI=…` when the certificate has no common
/// name, `mtls:sha256=…` when it has no usable name at all). Never holds a secret.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallerIdentity(String);

impl CallerIdentity {
    /// The identity of the `[[client_tokens]]` entry named `name`.
    pub fn token(name: &str) -> Self {
        Self(format!("token:{name}"))
    }

    /// An identity taken from a verified client certificate (`what` such as `CN=synthesis`).
    pub(crate) fn mtls(what: &str) -> Self {
        Self(format!("mtls:{what}"))
    }

    /// The identity as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CallerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The authenticated caller of `req`, or `None` when the service authenticates no callers (no
/// `[[client_tokens]]` for it and no `--tls-client-ca`) or the RPC is not a data-plane one.
pub fn caller_identity<T>(req: &tonic::Request<T>) -> Option<&CallerIdentity> {
    req.extensions().get::<CallerIdentity>()
}

/// One accepted token: the caller's name, the digest of its token and, when its entry has
/// `tenants`, its binding.
#[derive(Clone)]
struct Accepted {
    name: String,
    digest: [u8; 32],
    binding: Option<TenantBinding>,
}

/// A token of the config that this service does not accept (its entry's `services` leave it
/// out): known only to say so to a caller who presents it.
#[derive(Clone)]
struct NotHere {
    name: String,
    digest: [u8; 32],
    services: String,
}

/// How a service authenticates its data-plane callers (module doc). Cheap to clone.
#[derive(Clone)]
pub struct ClientAuth {
    tokens: Arc<Vec<Accepted>>,
    mtls: bool,
    /// This service's name and the config's tokens it does not accept ([`ClientAuth::load`]).
    not_here: Arc<(&'static str, Vec<NotHere>)>,
}

impl fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.tokens.iter().map(|t| t.name.as_str()).collect();
        f.debug_struct("ClientAuth")
            .field("tokens", &names)
            .field("mtls", &self.mtls)
            .finish()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl ClientAuth {
    /// No authentication: every call is let through, without identity.
    pub fn open() -> Self {
        Self {
            tokens: Arc::new(Vec::new()),
            mtls: false,
            not_here: Arc::default(),
        }
    }

    /// Reads the tokens of the `entries` that `service` accepts; `mtls` when the server
    /// verifies client certificates (`--tls-client-ca`). Errors, naming the entry and never a
    /// value: an unreadable or empty credential, a token shorter than [`MIN_TOKEN_CHARS`], two
    /// entries with the same token (their callers could not be told apart).
    pub fn load(
        entries: &[ClientTokenConfig],
        service: DataPlane,
        mtls: bool,
    ) -> Result<Self, String> {
        let mut tokens = Vec::new();
        let mut not_here = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            if !entry.accepted_by(service) {
                // Another service's token (one this process may not even have the value of).
                if let Ok(secret) = entry.token.resolve() {
                    let services: Vec<&str> = entry.services.iter().map(|s| s.as_str()).collect();
                    not_here.push(NotHere {
                        name: entry.name.clone(),
                        digest: digest(secret.expose()),
                        services: services.join(", "),
                    });
                }
                continue;
            }
            let path = format!("client_tokens[{i}].token");
            let secret = entry.token.resolve().map_err(|e| format!("{path}: {e}"))?;
            let chars = secret.expose().chars().count();
            if chars < MIN_TOKEN_CHARS {
                return Err(format!(
                    "{path}: the token of {:?} has {chars} characters; use at least {MIN_TOKEN_CHARS} (e.g. `openssl rand -hex 24`)",
                    entry.name
                ));
            }
            let binding = (entry.tenants.as_ref())
                .map(|tenants| TenantBinding::new(entry.name.clone(), tenants.clone()));
            tokens.push((entry.name.clone(), secret, binding));
        }
        let mut auth = Self::with_bound_tokens(tokens, mtls)?;
        auth.not_here = Arc::new((service.as_str(), not_here));
        Ok(auth)
    }

    /// [`ClientAuth::load`], then logs who must authenticate (token names, never the tokens):
    /// what a server runs at start-up.
    pub fn load_announced(
        entries: &[ClientTokenConfig],
        service: DataPlane,
        mtls: bool,
    ) -> Result<Self, String> {
        let callers = Self::load(entries, service, mtls)?;
        let bound: Vec<&str> = (callers.tokens.iter())
            .filter(|t| t.binding.is_some())
            .map(|t| t.name.as_str())
            .collect();
        tracing::info!(
            client_tokens = ?callers.token_names(),
            bound_to_tenants = ?bound,
            client_certificates = callers.accepts_certificates(),
            "data-plane callers {}",
            if callers.is_enabled() { "must authenticate" } else { "are not authenticated" }
        );
        if mtls && !bound.is_empty() {
            tracing::warn!(
                "callers by client certificate act for any tenant: a certificate authenticates, it binds no tenant; give such a caller a bound client token to send as well"
            );
        }
        Ok(callers)
    }

    /// Accepts `tokens` (caller name, token) and, with `mtls`, verified client certificates.
    /// Errors: two names with the same token.
    pub fn with_tokens(
        tokens: impl IntoIterator<Item = (String, Secret)>,
        mtls: bool,
    ) -> Result<Self, String> {
        let unbound = tokens
            .into_iter()
            .map(|(name, secret)| (name, secret, None));
        Self::with_bound_tokens(unbound, mtls)
    }

    /// [`ClientAuth::with_tokens`] where a token may be bound to tenants (its
    /// [`TenantBinding`]; `None`: any tenant).
    pub fn with_bound_tokens(
        tokens: impl IntoIterator<Item = (String, Secret, Option<TenantBinding>)>,
        mtls: bool,
    ) -> Result<Self, String> {
        let mut accepted: Vec<Accepted> = Vec::new();
        for (name, secret, binding) in tokens {
            let digest = digest(secret.expose());
            if let Some(twin) = accepted.iter().find(|a| a.digest == digest) {
                return Err(format!(
                    "client tokens {:?} and {name:?} are the same token: give each caller its own",
                    twin.name
                ));
            }
            accepted.push(Accepted {
                name,
                digest,
                binding,
            });
        }
        Ok(Self {
            tokens: Arc::new(accepted),
            mtls,
            not_here: Arc::default(),
        })
    }

    /// True when calls must be authenticated (some token accepted, or mTLS).
    pub fn is_enabled(&self) -> bool {
        self.mtls || !self.tokens.is_empty()
    }

    /// The names of the accepted tokens (for the start-up log line).
    pub fn token_names(&self) -> Vec<&str> {
        self.tokens.iter().map(|t| t.name.as_str()).collect()
    }

    /// True when client certificates are accepted.
    pub fn accepts_certificates(&self) -> bool {
        self.mtls
    }

    /// Who sent a request with `headers` and `extensions` (the HTTP/2 request's), or `None`
    /// when nothing is configured. Errors: UNAUTHENTICATED with how to authenticate, for a
    /// missing, malformed or unknown token (and no verified certificate).
    pub fn authenticate(
        &self,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
    ) -> Result<Option<CallerIdentity>, Status> {
        Ok(self
            .authenticate_bound(headers, extensions)?
            .map(|(who, _)| who))
    }

    /// [`ClientAuth::authenticate`], with the caller's [`TenantBinding`] when its token is
    /// bound (a client certificate binds none).
    pub fn authenticate_bound(
        &self,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
    ) -> Result<Option<(CallerIdentity, Option<TenantBinding>)>, Status> {
        if !self.is_enabled() {
            return Ok(None);
        }
        match bearer_token(headers) {
            Ok(presented) => self.match_token(presented).map(Some),
            Err(BearerError::Missing) => match super::peer::identity(extensions) {
                Some(identity) if self.mtls => Ok(Some((identity, None))),
                _ => Err(super::refused(
                    AuthReason::ClientTokenMissing,
                    self.how_to(),
                )),
            },
            Err(BearerError::Repeated) => Err(super::refused(
                AuthReason::ClientTokenMissing,
                "send exactly one metadata entry 'authorization: Bearer <client token>'",
            )),
            Err(BearerError::Malformed) => Err(super::refused(
                AuthReason::ClientTokenMissing,
                "authorization metadata must be 'Bearer <client token>'",
            )),
        }
    }

    /// The caller whose token is `presented`, and its binding: compared with every accepted
    /// digest, no early exit.
    fn match_token(
        &self,
        presented: &str,
    ) -> Result<(CallerIdentity, Option<TenantBinding>), Status> {
        let presented = digest(presented);
        let mut found = None;
        for accepted in self.tokens.iter() {
            if bool::from(presented.ct_eq(&accepted.digest)) {
                found = Some(accepted);
            }
        }
        let mut elsewhere = None;
        for other in &self.not_here.1 {
            if bool::from(presented.ct_eq(&other.digest)) {
                elsewhere = Some(other);
            }
        }
        found
            .map(|a| (CallerIdentity::token(&a.name), a.binding.clone()))
            .ok_or_else(|| match elsewhere {
                Some(other) => super::refused(
                    AuthReason::ClientTokenRejected,
                    format!(
                        "client token rejected: it is the [[client_tokens]] entry {:?}, which is \
                         not allowed for this service ({service}): its services = [{}]; add \
                         \"{service}\" to them, or send a token this service accepts",
                        other.name,
                        other.services,
                        service = self.not_here.0,
                    ),
                ),
                None => super::refused(
                    AuthReason::ClientTokenRejected,
                    "client token rejected: it is none of this server's [[client_tokens]] \
                     (ask the operator for the token configured for your service)",
                ),
            })
    }

    /// The message for a caller that presented nothing.
    fn how_to(&self) -> String {
        let token = "send metadata 'authorization: Bearer <client token>' with a token of the \
                     server's [[client_tokens]] config (voxctl: --token or VOXPOOL_CLIENT_TOKEN)";
        match (self.tokens.is_empty(), self.mtls) {
            (false, true) => format!(
                "this RPC needs an authenticated caller: {token}, or connect over TLS with a \
                 client certificate signed by the server's --tls-client-ca"
            ),
            (true, true) => "this RPC needs an authenticated caller: connect over TLS with a \
                             client certificate signed by the server's --tls-client-ca \
                             (VOXPOOL_TLS_CLIENT_CERT and VOXPOOL_TLS_CLIENT_KEY on our clients)"
                .to_owned(),
            _ => format!("this RPC needs an authenticated caller: {token}"),
        }
    }
}

/// The bearer token a process presents to other voxpool services' data-plane RPCs, as the
/// interceptor of its gRPC clients: adds `authorization: Bearer <token>` (when there is one,
/// and the call does not carry an `authorization` of its own, as admin calls do) and the trace
/// context (`TraceContextInterceptor`). `Debug` never shows the token.
#[derive(Clone, Default)]
pub struct ClientToken(Option<MetadataValue<Ascii>>);

impl ClientToken {
    /// Sends no token (the callee then lets the call through only when it authenticates no
    /// one).
    pub fn none() -> Self {
        Self(None)
    }

    /// Sends `token`. Errors: characters a header cannot carry (the value is not shown).
    pub fn new(token: &Secret) -> Result<Self, String> {
        let mut value: MetadataValue<Ascii> = format!("Bearer {}", token.expose())
            .parse()
            .map_err(|_| "the client token holds characters not allowed in a header".to_owned())?;
        value.set_sensitive(true);
        Ok(Self(Some(value)))
    }

    /// The token from `file` if given, else `env_value` (a variable's value), else none.
    /// Errors: an unreadable or empty file or value, naming `env_name` or the file.
    pub fn load(
        file: Option<&Path>,
        env_name: &str,
        env_value: Option<&str>,
    ) -> Result<Self, String> {
        let (origin, raw) = match (file, env_value) {
            (Some(path), _) => (
                path.display().to_string(),
                std::fs::read_to_string(path).map_err(|e| {
                    format!("cannot read client token file {}: {e}", path.display())
                })?,
            ),
            (None, Some(value)) => (env_name.to_owned(), value.to_owned()),
            (None, None) => return Ok(Self::none()),
        };
        let secret = Secret::new(raw);
        if secret.is_empty() {
            return Err(format!("client token from {origin} is empty"));
        }
        Self::new(&secret).map_err(|e| format!("{e} ({origin})"))
    }

    /// True when a token is sent.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }
}

impl fmt::Debug for ClientToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "ClientToken(<redacted>)"
        } else {
            "ClientToken(none)"
        })
    }
}

impl tonic::service::Interceptor for ClientToken {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        let mut request = tonic::service::Interceptor::call(
            &mut crate::telemetry::TraceContextInterceptor,
            request,
        )?;
        // A call that carries its own `authorization` (an admin RPC's token) keeps it.
        if let Some(value) = &self.0
            && !request.metadata().contains_key("authorization")
        {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert("authorization", value.parse().unwrap());
        h
    }

    fn auth() -> ClientAuth {
        ClientAuth::with_tokens(
            [
                (
                    "synthesis".to_owned(),
                    Secret::new("synthesis-token-0123456789"),
                ),
                ("voxctl".to_owned(), Secret::new("voxctl-token-0123456789")),
            ],
            false,
        )
        .unwrap()
    }

    #[test]
    fn a_known_token_names_its_caller_and_any_scheme_case_works() {
        let none = http::Extensions::new();
        for scheme in ["Bearer", "bearer", "BEARER"] {
            let who = auth()
                .authenticate(
                    &headers(&format!("{scheme} voxctl-token-0123456789")),
                    &none,
                )
                .unwrap();
            assert_eq!(who, Some(CallerIdentity::token("voxctl")), "{scheme}");
        }
        assert_eq!(CallerIdentity::token("voxctl").to_string(), "token:voxctl");
    }

    #[test]
    fn missing_wrong_repeated_and_malformed_tokens_are_unauthenticated_without_the_value() {
        let none = http::Extensions::new();
        let auth = auth();
        let missing = auth
            .authenticate(&http::HeaderMap::new(), &none)
            .unwrap_err();
        assert_eq!(missing.code(), tonic::Code::Unauthenticated);
        assert!(
            missing.message().contains("authorization: Bearer")
                && missing.message().contains("[[client_tokens]]"),
            "says how: {}",
            missing.message()
        );
        let wrong = auth
            .authenticate(&headers("Bearer not-a-known-token-123"), &none)
            .unwrap_err();
        assert_eq!(wrong.code(), tonic::Code::Unauthenticated);
        assert!(
            !wrong.message().contains("not-a-known"),
            "{}",
            wrong.message()
        );
        let mut two = headers("Bearer voxctl-token-0123456789");
        two.append("authorization", "Bearer nope".parse().unwrap());
        let err = auth.authenticate(&two, &none).unwrap_err();
        assert!(err.message().contains("exactly one"), "{}", err.message());
        let err = auth
            .authenticate(&headers("voxctl-token-0123456789"), &none)
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
    }

    #[test]
    fn with_nothing_configured_calls_pass_without_identity() {
        let open = ClientAuth::open();
        assert!(!open.is_enabled());
        assert_eq!(
            open.authenticate(&http::HeaderMap::new(), &http::Extensions::new())
                .unwrap(),
            None
        );
    }

    #[test]
    fn two_callers_with_one_token_are_refused_and_debug_shows_names_only() {
        let err = ClientAuth::with_tokens(
            [
                ("a".to_owned(), Secret::new("same-token-0123456789")),
                ("b".to_owned(), Secret::new("same-token-0123456789")),
            ],
            false,
        )
        .unwrap_err();
        assert!(
            err.contains("same token") && !err.contains("same-token-"),
            "{err}"
        );
        let shown = format!("{:?}", auth());
        assert!(
            shown.contains("synthesis") && !shown.contains("0123456789"),
            "{shown}"
        );
        let token = ClientToken::new(&Secret::new("voxctl-token-0123456789")).unwrap();
        assert!(!format!("{token:?}").contains("0123456789"));
    }

    #[test]
    fn load_reads_the_entries_of_this_service_and_refuses_short_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let (long, short) = (dir.path().join("long"), dir.path().join("short"));
        std::fs::write(&long, "file-token-0123456789\n").unwrap();
        std::fs::write(&short, "abc\n").unwrap();
        let entry = |name: &str, path: &Path, services: Vec<DataPlane>| ClientTokenConfig {
            name: name.to_owned(),
            token: voxpool_config::CredentialRef::File(path.to_owned()),
            services,
            tenants: None,
        };
        let entries = [
            entry("synthesis", &long, vec![DataPlane::Scheduler]),
            entry("short", &short, vec![DataPlane::Synthesis]),
        ];
        let scheduler = ClientAuth::load(&entries, DataPlane::Scheduler, false).unwrap();
        assert_eq!(scheduler.token_names(), ["synthesis"]);
        // An entry's `tenants` binds its token; one without acts for any tenant.
        let mut bound = entry("apps", &long, vec![DataPlane::Jobs]);
        bound.tenants = Some(vec!["team-a".to_owned()]);
        let jobs = ClientAuth::load(&[bound], DataPlane::Jobs, false).unwrap();
        let (who, binding) = jobs
            .authenticate_bound(
                &headers("Bearer file-token-0123456789"),
                &http::Extensions::new(),
            )
            .unwrap()
            .expect("a caller");
        assert_eq!(who, CallerIdentity::token("apps"));
        assert_eq!(
            binding.map(|b| b.tenants().to_vec()),
            Some(vec!["team-a".to_owned()])
        );
        let (_, unbound) = scheduler
            .authenticate_bound(
                &headers("Bearer file-token-0123456789"),
                &http::Extensions::new(),
            )
            .unwrap()
            .expect("a caller");
        assert_eq!(unbound, None);
        let err = ClientAuth::load(&entries, DataPlane::Synthesis, false).unwrap_err();
        assert!(
            err.starts_with("client_tokens[1].token:") && !err.contains("abc"),
            "{err}"
        );
    }

    #[test]
    fn a_token_of_the_config_that_this_service_does_not_accept_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let (path, own) = (dir.path().join("token"), dir.path().join("own"));
        std::fs::write(&path, "synthesis-token-0123456789\n").unwrap();
        std::fs::write(&own, "voxctl-token-0123456789\n").unwrap();
        let entry = |name: &str, path: &Path, services| ClientTokenConfig {
            name: name.to_owned(),
            token: voxpool_config::CredentialRef::File(path.to_owned()),
            services,
            tenants: None,
        };
        let entries = [
            entry("synthesis", &path, vec![DataPlane::Scheduler]),
            entry("voxctl", &own, vec![]),
        ];
        let jobs = ClientAuth::load(&entries, DataPlane::Jobs, false).unwrap();
        let none = http::Extensions::new();
        let refused = jobs
            .authenticate(&headers("Bearer synthesis-token-0123456789"), &none)
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        assert!(
            refused
                .message()
                .contains("\"synthesis\", which is not allowed for this service (jobs)")
                && refused.message().contains("services = [scheduler]")
                && !refused.message().contains("0123456789"),
            "{}",
            refused.message()
        );
        let unknown = jobs
            .authenticate(&headers("Bearer some-other-token-0123456789"), &none)
            .unwrap_err();
        assert!(
            unknown.message().contains("none of this server's"),
            "{}",
            unknown.message()
        );
    }
}
