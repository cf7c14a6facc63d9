//! One Synthesize request with everything around it: the circuit breaker, the client-side
//! rate limit, the per-call deadline, and retries of retryable failures (see [`crate::retry`]).
//!
//! Every call carries `request_id = "<base>.<attempt>"`, so the server's logs (and tests) can
//! count the calls made for an item.

use std::{sync::Arc, time::Duration};

use backon::Retryable as _;
use governor::DefaultDirectRateLimiter;
use tonic::transport::Channel;
use voxpool_proto::synthesis::v1::{
    SynthesizeRequest, SynthesizeResponse, synthesis_client::SynthesisClient,
};

use crate::{
    breaker::{Breaker, Health},
    retry::{CallError, RetryPolicy},
    stats::Stats,
};

/// What every call of a batch shares.
#[derive(Clone)]
pub struct Caller {
    /// The Synthesis client (one HTTP/2 connection, cloned per call).
    pub client: SynthesisClient<Channel>,
    /// The shared circuit breaker.
    pub breaker: Arc<Breaker>,
    /// Client-side calls-per-second limit (`--qps`).
    pub limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// Retries.
    pub policy: RetryPolicy,
    /// Per-call deadline (`--deadline`).
    pub deadline: Duration,
    /// Counters.
    pub stats: Arc<Stats>,
}

/// The result of a request: the response or the last error, with the calls it took.
#[derive(Debug)]
pub struct Called {
    /// The response, or the error that ended the request.
    pub result: Result<SynthesizeResponse, CallError>,
    /// Calls made (1 + retries).
    pub calls: u32,
}

impl Caller {
    /// Sends `request` (its `request_id` is set per call from `request_id_base`) until it
    /// succeeds, fails with a non-retryable error, or runs out of attempts.
    pub async fn synthesize(&self, request: &SynthesizeRequest, request_id_base: &str) -> Called {
        let mut attempt = 0u32;
        let result = (|| {
            attempt += 1;
            self.once(request, format!("{request_id_base}.{attempt}"))
        })
        .retry(self.policy.ceilings())
        .when(CallError::retryable)
        .adjust(|error, ceiling| ceiling.map(|c| self.policy.delay(c, error)))
        .notify(|_, _| Stats::bump(&self.stats.retries))
        .await;
        Called {
            result,
            calls: attempt,
        }
    }

    async fn once(
        &self,
        request: &SynthesizeRequest,
        request_id: String,
    ) -> Result<SynthesizeResponse, CallError> {
        let permit = self.breaker.permit().await;
        if let Some(limiter) = &self.limiter {
            limiter.until_ready().await;
        }
        let mut message = request.clone();
        message.request_id = request_id;
        let mut grpc = tonic::Request::new(message);
        grpc.set_timeout(self.deadline);
        Stats::bump(&self.stats.calls);
        let mut client = self.client.clone();
        let result = match tokio::time::timeout(self.deadline, client.synthesize(grpc)).await {
            Err(_) => Err(CallError::deadline(self.deadline)),
            Ok(Err(status)) => Err(CallError::from_status(&status)),
            Ok(Ok(response)) => Ok(response.into_inner()),
        };
        permit.record(match &result {
            Ok(_) => Health::Up,
            Err(e) => e.health(),
        });
        result
    }
}
