//! Who is signed in: sessions kept in this process, known by a random id in a cookie
//! (`HttpOnly`, `SameSite=Strict`, `Secure` when the console serves TLS), each with its role
//! and its CSRF token.
//!
//! Two tokens sign in (`POST /login`, form field `token`): the admin token
//! (`VOXPOOL_ADMIN_TOKEN`, the one the services accept) gives the admin role, the read-only
//! console token (`VOXPOOL_CONSOLE_TOKEN` / `--console-token-file`) the viewer role, which sees
//! no admin action and is refused one (403) whatever it posts. Tokens are compared in
//! constant time and never kept in the session, a URL, a log or a page. Every state-changing
//! form carries the session's CSRF token ([`Session::check_csrf`]); the sign-in form, which
//! has no session yet, is refused from another origin instead (`crate::pages::login`).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use axum_extra::extract::cookie::{Cookie, SameSite};
use rand::RngCore;
use subtle::ConstantTimeEq;
use voxpool_domain::secret::Secret;

/// The session cookie's name.
pub const COOKIE: &str = "voxpool_console_session";

/// A session ends this long after its last request.
const IDLE: Duration = Duration::from_secs(12 * 3600);

/// Most sessions kept; beyond it the stalest is dropped.
const MAX_SESSIONS: usize = 10_000;

/// What a session may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Everything, admin actions included.
    Admin,
    /// Read-only: every page, no admin action.
    Viewer,
}

/// A signed-in session.
#[derive(Clone)]
pub struct Session {
    /// Its role.
    pub role: Role,
    /// The token its forms carry.
    pub csrf: String,
    last_seen: Instant,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// True for the admin role.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whether `token` (a form's `csrf` field) is this session's, in constant time.
    pub fn check_csrf(&self, token: &str) -> bool {
        !token.is_empty() && bool::from(token.as_bytes().ct_eq(self.csrf.as_bytes()))
    }
}

/// The sessions of this process and the tokens that open them.
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
    admin: Option<Secret>,
    viewer: Option<Secret>,
    secure: bool,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("admin_token", &self.admin.is_some())
            .field("viewer_token", &self.viewer.is_some())
            .field("secure", &self.secure)
            .finish_non_exhaustive()
    }
}

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

fn same(given: &str, expected: Option<&Secret>) -> bool {
    expected.is_some_and(|e| bool::from(given.as_bytes().ct_eq(e.expose().as_bytes())))
}

impl Sessions {
    /// Sessions opened by `admin` and `viewer`; cookies marked `Secure` when `secure`.
    pub fn new(admin: Option<Secret>, viewer: Option<Secret>, secure: bool) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            admin,
            viewer,
            secure,
        }
    }

    /// True when no token can sign in (the console then says how to configure one).
    pub fn none_configured(&self) -> bool {
        self.admin.is_none() && self.viewer.is_none()
    }

    /// A new session for `token`, and its cookie; `None` for a token that is neither.
    pub fn sign_in(&self, token: &str) -> Option<Cookie<'static>> {
        let token = token.trim();
        let role = if same(token, self.admin.as_ref()) {
            Role::Admin
        } else if same(token, self.viewer.as_ref()) {
            Role::Viewer
        } else {
            return None;
        };
        let id = random_hex();
        let session = Session {
            role,
            csrf: random_hex(),
            last_seen: Instant::now(),
        };
        let mut map = self
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        map.retain(|_, s| now.duration_since(s.last_seen) < IDLE);
        if map.len() >= MAX_SESSIONS
            && let Some(stalest) = map
                .iter()
                .min_by_key(|(_, s)| s.last_seen)
                .map(|(k, _)| k.clone())
        {
            map.remove(&stalest);
        }
        map.insert(id.clone(), session);
        Some(self.cookie(id, false))
    }

    /// The session of cookie value `id`, if it lives (its idle clock restarts).
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut map = self
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let session = map.get_mut(id)?;
        if session.last_seen.elapsed() >= IDLE {
            map.remove(id);
            return None;
        }
        session.last_seen = Instant::now();
        Some(session.clone())
    }

    /// Ends session `id`; answers the cookie that clears it.
    pub fn sign_out(&self, id: &str) -> Cookie<'static> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
        self.cookie(String::new(), true)
    }

    fn cookie(&self, value: String, expired: bool) -> Cookie<'static> {
        let mut cookie = Cookie::build((COOKIE, value))
            .http_only(true)
            .same_site(SameSite::Strict)
            .secure(self.secure)
            .path("/")
            .build();
        if expired {
            cookie.make_removal();
        }
        cookie
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> Sessions {
        Sessions::new(
            Some(Secret::new("admin-token-0123456789")),
            Some(Secret::new("viewer-token-0123456789")),
            true,
        )
    }

    #[test]
    fn each_token_opens_its_role_and_others_open_nothing() {
        let s = sessions();
        let admin = s.sign_in("admin-token-0123456789").expect("admin");
        let viewer = s.sign_in(" viewer-token-0123456789\n").expect("viewer");
        assert_eq!(s.get(admin.value()).map(|x| x.role), Some(Role::Admin));
        assert_eq!(s.get(viewer.value()).map(|x| x.role), Some(Role::Viewer));
        assert!(s.sign_in("admin-token-012345678").is_none());
        assert!(s.sign_in("").is_none());
        assert!(s.get("not-a-session").is_none());
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_and_holds_no_token() {
        let cookie = sessions().sign_in("admin-token-0123456789").expect("admin");
        assert_eq!(cookie.http_only(), Some(true));
        assert_eq!(cookie.same_site(), Some(SameSite::Strict));
        assert_eq!(cookie.secure(), Some(true));
        assert!(!cookie.value().contains("admin-token"));
    }

    #[test]
    fn csrf_accepts_only_the_sessions_own_token() {
        let s = sessions();
        let cookie = s.sign_in("admin-token-0123456789").expect("admin");
        let session = s.get(cookie.value()).expect("session");
        assert!(session.check_csrf(&session.csrf.clone()));
        assert!(!session.check_csrf(""));
        assert!(!session.check_csrf("0000"));
        assert!(!format!("{session:?}").contains(&session.csrf));
    }

    #[test]
    fn signing_out_ends_the_session() {
        let s = sessions();
        let cookie = s.sign_in("viewer-token-0123456789").expect("viewer");
        let cleared = s.sign_out(cookie.value());
        assert!(s.get(cookie.value()).is_none());
        assert_eq!(cleared.value(), "");
    }
}
