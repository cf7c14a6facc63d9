//! What a reported outcome does to a clone row: its next state, work and due time. Pure, so
//! every transition is tested without a database.
//!
//! | outcome | state | work | due |
//! |---|---|---|---|
//! | training | TRAINING | POLL | now + poll_after (clamped) |
//! | ready | READY | KEEPALIVE with a keep-alive rule, else NONE | now + keep_alive |
//! | failed | FAILED | NONE | — |
//! | retry | unchanged | unchanged | now + max(after, back-off); FAILED after [`MAX_ATTEMPTS`] |
//! | deleted | row removed | | |
//! | expired | EXPIRED / RECLAIMED, vendor id cleared | NONE | — |
//!
//! A row whose work became DELETE while a CREATE or POLL ran (DeleteClone meanwhile) keeps
//! DELETE: a vendor id learned from the report is recorded so the delete can reach it; an
//! outcome that says there is nothing at the vendor removes the row.

use super::model::{CloneState, Outcome, VoiceClone, Work};

/// Claims of one step before a row that keeps failing transiently is FAILED.
pub const MAX_ATTEMPTS: u32 = 12;
/// Shortest wait before polling again, ms.
pub const MIN_POLL_MS: u64 = 500;
/// Longest wait before polling again, ms (also the back-off's cap).
pub const MAX_WAIT_MS: u64 = 600_000;
/// Longest error text kept, in characters.
pub const MAX_ERROR_CHARS: usize = 500;

/// What to do with the row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Store this.
    Update(VoiceClone),
    /// Remove the row.
    Remove,
}

/// The back-off after `attempts` claims of a step, ms: 1 s, 2 s, 4 s, … capped.
pub fn backoff_ms(attempts: u32) -> u64 {
    let exp = attempts.saturating_sub(1).min(20);
    (1_000u64 << exp).min(MAX_WAIT_MS)
}

/// `text` escaped (vendor text is untrusted) and cut to [`MAX_ERROR_CHARS`].
pub fn error_text(text: &str) -> String {
    let quoted = voxpool_domain::untrusted::quote(text);
    quoted.chars().take(MAX_ERROR_CHARS).collect()
}

fn ms_to_us(ms: u64) -> i64 {
    i64::try_from(ms.saturating_mul(1_000)).unwrap_or(i64::MAX)
}

/// The row after `outcome` on `current`, at `now_us`; `keep_alive_us` is the scope's rule.
pub fn apply(
    current: &VoiceClone,
    outcome: &Outcome,
    keep_alive_us: Option<i64>,
    now_us: i64,
) -> Next {
    let mut next = current.clone();
    let deleting = current.work == Work::Delete;
    next.due_at_us = now_us;
    match outcome {
        Outcome::Training {
            vendor_voice_id,
            poll_after_ms,
        } => {
            next.vendor_voice_id = Some(vendor_voice_id.clone());
            if !deleting {
                next.state = CloneState::Training;
                next.work = Work::Poll;
                next.attempts = 0;
                next.error = None;
                next.due_at_us =
                    now_us + ms_to_us((*poll_after_ms).clamp(MIN_POLL_MS, MAX_WAIT_MS));
            }
        }
        Outcome::Ready {
            vendor_voice_id,
            expires_at_us,
        } => {
            next.vendor_voice_id = Some(vendor_voice_id.clone());
            if !deleting {
                next.state = CloneState::Ready;
                next.attempts = 0;
                next.error = None;
                if current.work == Work::KeepAlive {
                    next.last_used_at_us = Some(now_us);
                }
                next.expires_at_us = *expires_at_us;
                match keep_alive_us {
                    Some(every) => {
                        next.work = Work::KeepAlive;
                        next.due_at_us = now_us.saturating_add(every);
                    }
                    None => next.work = Work::None,
                }
            }
        }
        Outcome::Failed { error } => {
            if deleting && current.vendor_voice_id.is_none() {
                return Next::Remove;
            }
            next.state = CloneState::Failed;
            next.work = Work::None;
            next.error = Some(error_text(error));
        }
        Outcome::Retry { after_ms, error } => {
            next.error = Some(error_text(error));
            if current.attempts >= MAX_ATTEMPTS && !deleting {
                next.state = CloneState::Failed;
                next.work = Work::None;
                next.error = Some(error_text(&format!(
                    "gave up after {} tries of {}: {error}",
                    current.attempts,
                    current.work.as_str()
                )));
            } else {
                let wait = (*after_ms).max(backoff_ms(current.attempts));
                next.due_at_us = now_us + ms_to_us(wait.min(MAX_WAIT_MS));
            }
        }
        Outcome::Deleted => return Next::Remove,
        Outcome::Expired { error, reclaimed } => {
            if deleting {
                return Next::Remove;
            }
            next.state = if *reclaimed {
                CloneState::Reclaimed
            } else {
                CloneState::Expired
            };
            next.work = Work::None;
            next.vendor_voice_id = None;
            next.error = Some(error_text(error));
        }
        // An import outcome on a clone row changes nothing (the edge refuses it earlier).
        Outcome::Imported(_) => {}
    }
    Next::Update(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: CloneState, work: Work) -> VoiceClone {
        VoiceClone {
            pack_id: "vp_1".into(),
            scope: "team-a".into(),
            vendor_voice_id: None,
            state,
            created_at_us: 0,
            last_used_at_us: None,
            expires_at_us: None,
            error: None,
            work,
            due_at_us: 0,
            attempts: 1,
        }
    }

    fn updated(next: Next) -> VoiceClone {
        match next {
            Next::Update(v) => v,
            Next::Remove => panic!("expected an update"),
        }
    }

    #[test]
    fn create_then_training_then_ready_with_and_without_keep_alive() {
        let pending = row(CloneState::Pending, Work::Create);
        let training = updated(apply(
            &pending,
            &Outcome::Training {
                vendor_voice_id: "v1".into(),
                poll_after_ms: 2_000,
            },
            None,
            1_000_000,
        ));
        assert_eq!(
            (training.state, training.work, training.due_at_us),
            (CloneState::Training, Work::Poll, 3_000_000)
        );
        let ready = Outcome::Ready {
            vendor_voice_id: "v1".into(),
            expires_at_us: None,
        };
        let plain = updated(apply(&training, &ready, None, 5_000_000));
        assert_eq!((plain.state, plain.work), (CloneState::Ready, Work::None));
        let kept = updated(apply(&training, &ready, Some(10_000_000), 5_000_000));
        assert_eq!((kept.work, kept.due_at_us), (Work::KeepAlive, 15_000_000));
        let again = updated(apply(&kept, &ready, Some(10_000_000), 16_000_000));
        assert_eq!(again.last_used_at_us, Some(16_000_000));
        assert_eq!(again.due_at_us, 26_000_000);
    }

    #[test]
    fn retry_backs_off_then_gives_up() {
        let mut r = row(CloneState::Pending, Work::Create);
        r.attempts = 3;
        let retry = Outcome::Retry {
            after_ms: 0,
            error: "503".into(),
        };
        let next = updated(apply(&r, &retry, None, 0));
        assert_eq!((next.state, next.work), (CloneState::Pending, Work::Create));
        assert_eq!(next.due_at_us, 4_000_000);
        r.attempts = MAX_ATTEMPTS;
        let gave_up = updated(apply(&r, &retry, None, 0));
        assert_eq!(
            (gave_up.state, gave_up.work),
            (CloneState::Failed, Work::None)
        );
        assert!(gave_up.error.unwrap_or_default().contains("gave up"));
    }

    #[test]
    fn expired_clears_the_vendor_id_and_failed_keeps_the_escaped_error() {
        let mut r = row(CloneState::Ready, Work::KeepAlive);
        r.vendor_voice_id = Some("v1".into());
        let gone = updated(apply(
            &r,
            &Outcome::Expired {
                error: "voice_not_found".into(),
                reclaimed: false,
            },
            None,
            0,
        ));
        assert_eq!((gone.state, gone.work), (CloneState::Expired, Work::None));
        assert_eq!(gone.vendor_voice_id, None);
        let failed = updated(apply(
            &row(CloneState::Pending, Work::Create),
            &Outcome::Failed {
                error: "bad\nclip".into(),
            },
            None,
            0,
        ));
        assert_eq!(failed.state, CloneState::Failed);
        assert!(!failed.error.unwrap_or_default().contains('\n'));
    }

    #[test]
    fn a_delete_asked_meanwhile_wins_over_a_create_outcome() {
        let deleting = row(CloneState::Pending, Work::Delete);
        let learned = updated(apply(
            &deleting,
            &Outcome::Training {
                vendor_voice_id: "v9".into(),
                poll_after_ms: 1_000,
            },
            None,
            7,
        ));
        assert_eq!(learned.work, Work::Delete);
        assert_eq!(learned.vendor_voice_id.as_deref(), Some("v9"));
        assert_eq!(learned.due_at_us, 7);
        assert_eq!(
            apply(&deleting, &Outcome::Failed { error: "x".into() }, None, 0),
            Next::Remove
        );
        assert_eq!(apply(&deleting, &Outcome::Deleted, None, 0), Next::Remove);
    }
}
