//! Progress while a batch runs: an `indicatif` bar on a terminal, plain periodic lines
//! otherwise (logs, CI), and a line whenever the circuit breaker changes state, naming the
//! service and URL that fails.
//!
//! Rate and ETA count characters of the parts that came back, not finished items, so they
//! keep moving (and stay honest) while one long item runs; with nothing spoken yet the ETA
//! is unknown rather than zero.

use std::{
    io::IsTerminal as _,
    sync::Arc,
    time::{Duration, Instant},
};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{
    breaker::{Breaker, Phase},
    stats::{Stats, StatsView},
};

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal, else lines every 10 s.
    Auto,
    /// Always the bar.
    Bar,
    /// A plain line every period.
    Lines(Duration),
    /// Nothing (breaker changes are still printed).
    Quiet,
}

/// The running display; [`Progress::finish`] stops it.
pub struct Progress {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

struct Source {
    stats: Arc<Stats>,
    breaker: Arc<Breaker>,
    started: Instant,
}

impl Progress {
    /// Starts showing progress of `stats` and `breaker` on stderr.
    pub fn start(mode: ProgressMode, stats: Arc<Stats>, breaker: Arc<Breaker>) -> Self {
        let mode = match mode {
            ProgressMode::Auto if std::io::stderr().is_terminal() => ProgressMode::Bar,
            ProgressMode::Auto => ProgressMode::Lines(Duration::from_secs(10)),
            other => other,
        };
        let stop = CancellationToken::new();
        let source = Source {
            stats,
            breaker,
            started: Instant::now(),
        };
        let task = tokio::spawn(run(mode, source, stop.clone()));
        Self { stop, task }
    }

    /// Stops the display (the bar is cleared; the summary follows).
    pub async fn finish(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

async fn run(mode: ProgressMode, source: Source, stop: CancellationToken) {
    let bar = (mode == ProgressMode::Bar).then(|| new_bar(source.stats.view().total));
    let period = match mode {
        ProgressMode::Lines(p) => p,
        _ => Duration::from_millis(200),
    };
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    let mut phases = source.breaker.subscribe();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {
                let line = status_line(&source);
                match &bar {
                    Some(bar) => {
                        let view = source.stats.view();
                        bar.set_length(view.total);
                        bar.set_position(view.done + view.failed);
                        bar.set_message(line.message);
                    }
                    None if matches!(mode, ProgressMode::Lines(_)) => crate::say!("voxctl: {}", line.full),
                    None => {}
                }
            }
            changed = phases.changed() => {
                if changed.is_err() {
                    continue;
                }
                let phase = *phases.borrow_and_update();
                let text = breaker_change(phase, &source.breaker);
                match &bar {
                    Some(bar) => bar.println(text),
                    None => crate::say!("{text}"),
                }
            }
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

fn new_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{bar:30.cyan/blue} {pos}/{len} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    bar
}

fn breaker_change(phase: Phase, breaker: &Breaker) -> String {
    let failure = breaker
        .last_failure()
        .unwrap_or_else(|| "most recent calls failed".into());
    let probe_in = breaker.retry_in().unwrap_or_default().as_secs_f64();
    match phase {
        Phase::Open if breaker.opened_from_closed() => format!(
            "voxctl: circuit breaker open (trip {}): {failure}; pausing the batch, probing in {probe_in:.1}s",
            breaker.trips()
        ),
        Phase::Open => {
            format!("voxctl: probe failed: {failure}; still paused, next probe in {probe_in:.1}s")
        }
        Phase::HalfOpen => "voxctl: circuit breaker half-open: sending one probe".into(),
        Phase::Closed => "voxctl: circuit breaker closed: resuming the batch".into(),
    }
}

struct Line {
    message: String,
    full: String,
}

fn status_line(source: &Source) -> Line {
    let view = source.stats.view();
    let elapsed = source.started.elapsed();
    let breaker = match (source.breaker.phase(), source.breaker.retry_in()) {
        (Phase::Open, Some(left)) => format!(
            "breaker open (probe in {})",
            humantime::format_duration(Duration::from_secs(left.as_secs()))
        ),
        (phase, _) => format!("breaker {}", phase.as_str()),
    };
    let message = format!(
        "{} · eta {}",
        format_counts(&view, elapsed, &breaker),
        eta(&view, elapsed).unwrap_or_else(|| "unknown".into())
    );
    let full = format!("{}/{} {message}", view.done + view.failed, view.total);
    Line { message, full }
}

/// `ok N · failed N · in flight N · N chars/s · breaker STATE`.
pub fn format_counts(view: &StatsView, elapsed: Duration, breaker: &str) -> String {
    let secs = elapsed.as_secs_f64().max(1e-3);
    format!(
        "ok {} · failed {} · in flight {} · {:.0} chars/s · {breaker}",
        view.done,
        view.failed,
        view.in_flight,
        view.chars_spoken as f64 / secs
    )
}

/// Time left at the rate characters came back so far (at least 1 s while work remains);
/// `None` before anything came back.
fn eta(view: &StatsView, elapsed: Duration) -> Option<String> {
    if view.done + view.failed >= view.total {
        return Some("0s".into());
    }
    if view.chars_spoken == 0 {
        return None;
    }
    let left_chars = view.chars_total.saturating_sub(view.chars_spoken).max(1);
    let secs = elapsed.as_secs_f64() * left_chars as f64 / view.chars_spoken as f64;
    let left = Duration::from_secs(secs.ceil().max(1.0) as u64);
    Some(humantime::format_duration(left).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_shows_counts_throughput_and_the_breaker_state() {
        let view = StatsView {
            total: 10,
            done: 4,
            failed: 1,
            in_flight: 3,
            chars_done: 2_000,
            chars_spoken: 2_000,
            chars_total: 4_000,
            ..StatsView::default()
        };
        let line = format_counts(&view, Duration::from_secs(2), "breaker open (probe in 1s)");
        assert_eq!(
            line,
            "ok 4 · failed 1 · in flight 3 · 1000 chars/s · breaker open (probe in 1s)"
        );
        assert_eq!(eta(&view, Duration::from_secs(5)).as_deref(), Some("5s"));
    }

    #[test]
    fn the_eta_moves_with_the_parts_of_one_long_item_and_is_never_zero_while_it_runs() {
        let one_long_item = |spoken| StatsView {
            total: 1,
            in_flight: 1,
            chars_total: 100_000,
            chars_spoken: spoken,
            ..StatsView::default()
        };
        assert_eq!(eta(&one_long_item(0), Duration::from_secs(60)), None);
        assert_eq!(
            eta(&one_long_item(25_000), Duration::from_secs(60)).as_deref(),
            Some("3m")
        );
        assert_eq!(
            eta(&one_long_item(99_999), Duration::from_secs(60)).as_deref(),
            Some("1s")
        );
    }
}
