//! `voxpool-console`: the browser console over the four services' public gRPC APIs.
//!
//! - [`backend`]: the one facade over the scheduler, catalog, synthesis and jobs clients;
//!   every page reads and acts through it, converting at its edge into [`view`] types.
//! - [`live`]: the pools page's live feed, one poller per process (at most one status call
//!   per second, however many browsers watch).
//! - [`session`]: sign-in with the admin or the read-only token, session cookies, CSRF.
//! - [`pages`]: the routes (edge): server-rendered pages, forms, the feed, assets, headers.
//! - [`server`]: wiring and the HTTP(S) listener.

pub mod backend;
pub mod live;
pub mod pages;
pub mod server;
pub mod session;
pub mod view;
