//! `voxctl job wait JOB`: asks `GetJob` every `--interval` until the job is over, showing its
//! progress the way `voxctl batch` does (`--progress`: a bar on a terminal, plain lines every
//! `--progress-interval` otherwise, or nothing), and ends with the job's outcome as the exit
//! code: 0 SUCCEEDED, 1 FAILED or CANCELLED, [`EXIT_TIMEOUT`] after `--timeout`, 130 at
//! Ctrl-C (the job goes on either way).
//!
//! A transient failure (UNAVAILABLE, a dead connection, a call that does not answer: see
//! [`super::transient`]) is said and retried with backoff for as long as the wait lasts; any
//! other failure ends the wait (exit 1).

use std::{
    io::IsTerminal as _,
    time::{Duration, Instant},
};

use backon::BackoffBuilder as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use voxpool_proto::jobs::v1::{GetJobRequest, Job, job};

use super::{Jobs, is_over, transient, view};
use crate::{
    ops::OpError,
    progress::ProgressMode,
    retry::{CallError, RetryPolicy},
};

/// Exit code when `--timeout` passes before the job is over (as `timeout(1)`).
pub const EXIT_TIMEOUT: u8 = 124;

/// Longest a single `GetJob` may take before it counts as a transient failure.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How `voxctl job wait` waits.
#[derive(Clone, Copy, Debug)]
pub struct WaitOptions {
    /// Period of `GetJob`.
    pub interval: Duration,
    /// Give up after this long.
    pub timeout: Option<Duration>,
    /// How progress is shown.
    pub progress: ProgressMode,
}

/// The exit code of a job that is over (0 SUCCEEDED, 1 otherwise).
pub fn exit_code(job: &Job) -> u8 {
    u8::from(view::job_state(job) != job::State::Succeeded)
}

/// The last line of a wait: the outcome, and where to look next.
pub fn outcome_line(job: &Job, name: &str) -> String {
    let c = job.item_counts.unwrap_or_default();
    let state = view::job_state(job);
    let took = view::seconds_between(job.start_time.as_ref(), job.end_time.as_ref());
    let took = humantime::format_duration(Duration::from_secs(took.round() as u64));
    let next = match state {
        job::State::Succeeded => format!("; voxctl job download {name} DIR writes the audio"),
        job::State::Failed => format!("; voxctl job items {name} --state failed says why"),
        _ => String::new(),
    };
    format!(
        "voxctl: {name} {}: {} items: {} ok, {} failed, {} cancelled; {} characters in {took}{next}",
        state.as_str_name(),
        job.total_items,
        c.succeeded,
        c.failed,
        c.cancelled,
        job.characters
    )
}

/// The progress display: a bar, periodic lines, or nothing.
enum Display {
    Bar(ProgressBar),
    Lines {
        every: Duration,
        last: Option<Instant>,
        state: i32,
    },
    Quiet,
}

impl Display {
    fn new(mode: ProgressMode) -> Self {
        let mode = match mode {
            ProgressMode::Auto if std::io::stderr().is_terminal() => ProgressMode::Bar,
            ProgressMode::Auto => ProgressMode::Lines(Duration::from_secs(10)),
            other => other,
        };
        match mode {
            ProgressMode::Bar | ProgressMode::Auto => {
                let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
                let style = ProgressStyle::with_template("{bar:30.cyan/blue} {pos}/{len} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar());
                bar.set_style(style.progress_chars("=> "));
                Display::Bar(bar)
            }
            ProgressMode::Lines(every) => Display::Lines {
                every,
                last: None,
                state: -1,
            },
            ProgressMode::Quiet => Display::Quiet,
        }
    }

    fn show(&mut self, job: &Job, name: &str) {
        let c = job.item_counts.unwrap_or_default();
        let state = view::job_state(job).as_str_name();
        match self {
            Display::Bar(bar) => {
                bar.set_length(u64::try_from(job.total_items).unwrap_or(0));
                bar.set_position(u64::try_from(c.succeeded + c.failed + c.cancelled).unwrap_or(0));
                bar.set_message(format!(
                    "{state} · ok {} · failed {} · running {} · queued {}",
                    c.succeeded, c.failed, c.running, c.queued
                ));
            }
            Display::Lines {
                every,
                last,
                state: shown,
            } => {
                let due = last.is_none_or(|at| at.elapsed() >= *every) || *shown != job.state;
                if due {
                    crate::say!("voxctl: {name} {state}: {}", view::progress_line(job));
                    *last = Some(Instant::now());
                    *shown = job.state;
                }
            }
            Display::Quiet => {}
        }
    }

    /// A line that must be read (a failure, the outcome), above the bar if there is one.
    fn say(&self, line: &str) {
        match self {
            Display::Bar(bar) => bar.println(line),
            _ => crate::say!("{line}"),
        }
    }

    fn finish(self) {
        if let Display::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// Waits for `name` (see the module doc); returns the exit code.
pub async fn wait(jobs: &Jobs, name: &str, options: WaitOptions) -> Result<u8, OpError> {
    let mut display = Display::new(options.progress);
    // Backoff of failed polls: from the interval up to 30 s, reset by an answer.
    let policy = RetryPolicy {
        max_attempts: u32::MAX,
        base: options.interval,
        cap: Duration::from_secs(30).max(options.interval),
        ..RetryPolicy::default()
    };
    let mut ceilings = policy.ceilings().build();
    let mut last: Option<Job> = None;
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    let timeout = async {
        match options.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(timeout);
    let end = loop {
        let mut client = jobs.client.clone();
        let call = tokio::time::timeout(
            CALL_TIMEOUT,
            client.get_job(GetJobRequest {
                name: name.to_owned(),
            }),
        );
        let answer = tokio::select! {
            answer = call => answer,
            _ = &mut interrupt => break End::Interrupted,
            () = &mut timeout => break End::TimedOut,
        };
        let pause = match answer {
            Ok(Ok(response)) => {
                let job = response.into_inner();
                display.show(&job, name);
                ceilings = policy.ceilings().build();
                let over = is_over(&job);
                last = Some(job);
                if over {
                    break End::Over;
                }
                options.interval
            }
            Ok(Err(status)) if !transient(&status) => {
                display.finish();
                return Err(jobs.error("GetJob", name, &status));
            }
            failed => {
                let status = match failed {
                    Ok(Err(status)) => status,
                    _ => tonic::Status::deadline_exceeded(format!(
                        "no answer within {}",
                        humantime::format_duration(CALL_TIMEOUT)
                    )),
                };
                let ceiling = ceilings.next().unwrap_or(policy.cap);
                // Never more often than --interval, whatever the jitter drew.
                let pause = policy
                    .delay(ceiling, &CallError::from_status(&status))
                    .max(options.interval);
                display.say(&format!(
                    "voxctl: {}; asking again in {:.1}s",
                    jobs.error("GetJob", name, &status),
                    pause.as_secs_f64()
                ));
                pause
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = &mut interrupt => break End::Interrupted,
            () = &mut timeout => break End::TimedOut,
        }
    };
    display.finish();
    let progress = last.as_ref().map_or_else(
        || "not heard from yet".to_owned(),
        |job| {
            format!(
                "{} ({})",
                view::job_state(job).as_str_name(),
                view::progress_line(job)
            )
        },
    );
    match (end, last) {
        (End::Over, Some(job)) => {
            crate::say!("{}", outcome_line(&job, name));
            Ok(exit_code(&job))
        }
        (End::TimedOut, _) => {
            crate::say!(
                "voxctl: stopped waiting after {} (--timeout): {name} is {progress}; it goes on",
                humantime::format_duration(options.timeout.unwrap_or_default())
            );
            Ok(EXIT_TIMEOUT)
        }
        _ => {
            crate::say!(
                "voxctl: stopped waiting: {name} is {progress}; it goes on (voxctl job cancel {name} stops it)"
            );
            Ok(130)
        }
    }
}

/// Why the wait ended.
enum End {
    /// The job is over.
    Over,
    /// `--timeout` passed.
    TimedOut,
    /// Ctrl-C.
    Interrupted,
}
