//! The fake's one way to take a mutex: recovering from poisoning, so a panicked test thread
//! never wedges the fake for the tests after it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, recovering from poisoning.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
