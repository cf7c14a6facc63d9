//! The `google.rpc.ErrorInfo.reason` of every error a voxpool service answers with and a
//! client may act on, one enum per service, and whether a call failed with it is worth
//! another try.
//!
//! Each reason is declared once below with its wire string and its [`Retry`] class; the
//! enum, its `ALL` list, parsing and the retry decision are generated from that one line, so
//! the server that sends a reason and the client that reads it cannot disagree on its
//! spelling or its meaning.

use std::{error::Error as _, fmt};

use tonic::{Code, Status};
use tonic_types::StatusExt as _;

/// Whether a call that failed may succeed if made again unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Transient: another try (after the server's `RetryInfo`, on another replica or once a
    /// dependency is back) may succeed.
    Again,
    /// The same request fails the same way: report it to the caller with the server's
    /// message (it names the field, pool or key and what to change).
    Never,
}

/// A typed `ErrorInfo.reason` of one service.
pub trait Reason: Copy + Eq + fmt::Debug + fmt::Display + 'static {
    /// Every reason of the service.
    const ALL: &'static [Self];

    /// The reason string on the wire (`POOL_FULL`).
    fn as_str(self) -> &'static str;

    /// Whether a call that failed with this reason is worth another try.
    fn retry(self) -> Retry;

    /// The reason a wire string names, if it is one of this service's.
    fn parse(raw: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|r| r.as_str() == raw)
    }

    /// The reason of a `Status` from this service, read from its `ErrorInfo` detail.
    fn of(status: &Status) -> Option<Self> {
        status
            .get_error_details()
            .error_info()
            .and_then(|info| Self::parse(&info.reason))
    }
}

/// Whether a call to the service whose reasons are `R` that failed with `status` is worth
/// another try: by its typed reason when it carries one of `R`, otherwise by its code —
/// UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED and transport failures (a status tonic
/// built from a connection error, which has a source) are transient, every other code is not.
pub fn retry_of<R: Reason>(status: &Status) -> Retry {
    if let Some(reason) = R::of(status) {
        return reason.retry();
    }
    match status.code() {
        _ if is_transport(status) => Retry::Again,
        Code::Unavailable | Code::ResourceExhausted | Code::DeadlineExceeded => Retry::Again,
        _ => Retry::Never,
    }
}

/// Whether `status` is a transport failure, not a server's answer: tonic builds UNKNOWN,
/// CANCELLED or INTERNAL with a source from a connection error.
pub fn is_transport(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unknown | Code::Cancelled | Code::Internal
    ) && status.source().is_some()
}

/// Declares one service's reasons: `Variant = "WIRE_NAME", RetryClass;` with its doc.
macro_rules! reasons {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, $retry:ident; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// The reason string on the wire.
            pub fn as_str(self) -> &'static str {
                <Self as Reason>::as_str(self)
            }

            /// The reason a wire string names, if it is one of this service's.
            pub fn parse(raw: &str) -> Option<Self> {
                <Self as Reason>::parse(raw)
            }

            /// The reason of a `Status`, read from its `ErrorInfo` detail.
            pub fn of(status: &Status) -> Option<Self> {
                <Self as Reason>::of(status)
            }
        }

        impl Reason for $name {
            const ALL: &'static [Self] = &[ $( $name::$variant, )* ];

            fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )*
                }
            }

            fn retry(self) -> Retry {
                match self {
                    $( $name::$variant => Retry::$retry, )*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(Reason::as_str(*self))
            }
        }
    };
}

reasons! {
    /// The reasons of the scheduler (`voxpool.scheduler.v1.PoolScheduler`).
    SchedulerReason {
        /// RESOURCE_EXHAUSTED: every eligible key is at capacity; retry after `RetryInfo`.
        PoolFull = "POOL_FULL", Again;
        /// RESOURCE_EXHAUSTED: the pool's line of waiters is full (`scheduler.max_waiters`).
        TooManyWaiters = "TOO_MANY_WAITERS", Again;
        /// RESOURCE_EXHAUSTED: BATCH leases already hold the pool's `batch_max_share`; retry
        /// after `RetryInfo` (the free slots are kept for live traffic).
        BatchShareFull = "BATCH_SHARE_FULL", Again;
        /// RESOURCE_EXHAUSTED: `exclude_keys` / `upstream_ids` leave no key.
        NoEligibleKey = "NO_ELIGIBLE_KEY", Never;
        /// UNAVAILABLE: every eligible key is cooling or disabled.
        KeysUnavailable = "KEYS_UNAVAILABLE", Again;
        /// DEADLINE_EXCEEDED: the caller's deadline ended the wait for a slot.
        WaitDeadline = "WAIT_DEADLINE", Never;
        /// FAILED_PRECONDITION: Renew of a lease that expired or was released.
        LeaseNotLive = "LEASE_NOT_LIVE", Never;
        /// UNAVAILABLE: this replica is draining; another replica will answer.
        ShuttingDown = "SHUTTING_DOWN", Again;
        /// UNAVAILABLE: the lease store does not answer.
        StoreUnavailable = "STORE_UNAVAILABLE", Again;
        /// UNAVAILABLE: the store lost the pool and could not re-seed it.
        PoolNotSeeded = "POOL_NOT_SEEDED", Again;
        /// UNAVAILABLE: the store lost the pool's state; grants resume when its recovery
        /// window ends (`RetryInfo`), while live leases re-register.
        PoolRecovering = "POOL_RECOVERING", Again;
        /// PERMISSION_DENIED: the lease id's signature does not verify: made up, altered, or
        /// signed under a lease secret the fleet no longer accepts. Never retry it.
        LeaseNotIssued = "LEASE_NOT_ISSUED", Never;
        /// NOT_FOUND: no pool with this id is configured (the message lists the pools).
        PoolNotFound = "POOL_NOT_FOUND", Never;
        /// NOT_FOUND: the pool has no key with this id.
        KeyNotFound = "KEY_NOT_FOUND", Never;
        /// NOT_FOUND: Report on a lease that is no longer live, without the `key_id` to
        /// report against.
        LeaseNotFound = "LEASE_NOT_FOUND", Never;
        /// NOT_FOUND: RenewFill of a fill lock the caller no longer holds (it expired, was
        /// released, or another caller took it over): stop relying on the lock.
        FillNotHeld = "FILL_NOT_HELD", Never;
        /// RESOURCE_EXHAUSTED: a budget covering the request (`[[budgets]]`) cannot hold its
        /// characters or cost this period; metadata `budget`, `subject`, `used`, `limit`,
        /// `resets_at_ms`, and `RetryInfo` until the reset. Not worth a retry before then.
        BudgetExhausted = "BUDGET_EXHAUSTED", Never;
    }
}

reasons! {
    /// The reasons of synthesis (`voxpool.synthesis.v1.Synthesis`).
    SynthesisReason {
        /// NOT_FOUND: no pool serves the snapshot's `tts_model_id` on this replica.
        PoolNotFound = "POOL_NOT_FOUND", Never;
        /// NOT_FOUND: the catalog has no voice pack with this id.
        PackNotFound = "PACK_NOT_FOUND", Never;
        /// FAILED_PRECONDITION: the snapshot's provider is not the pool's.
        ProviderMismatch = "PROVIDER_MISMATCH", Never;
        /// FAILED_PRECONDITION: this replica has no adapter for the provider.
        NoAdapter = "NO_ADAPTER", Never;
        /// FAILED_PRECONDITION: the pool has no key with a credential on this replica.
        CredentialsMissing = "CREDENTIALS_MISSING", Never;
        /// FAILED_PRECONDITION: the scheduler granted an upstream this replica does not know.
        UnknownUpstream = "UNKNOWN_UPSTREAM", Never;
        /// FAILED_PRECONDITION: the catalog refused the voice pack (disabled, unusable).
        PackUnusable = "PACK_UNUSABLE", Never;
        /// UNAVAILABLE: the catalog does not answer.
        CatalogUnavailable = "CATALOG_UNAVAILABLE", Again;
        /// FAILED_PRECONDITION: a reference clip the snapshot names is not in the blob store
        /// (metadata `digest`, `blob_store`).
        ReferenceMissing = "REFERENCE_MISSING", Never;
        /// FAILED_PRECONDITION: the blob under a clip's digest holds other bytes.
        ReferenceCorrupt = "REFERENCE_CORRUPT", Never;
        /// UNAVAILABLE: the blob store holding reference clips does not answer.
        BlobStoreUnavailable = "BLOB_STORE_UNAVAILABLE", Again;
        /// INTERNAL: the catalog answered with an error of its own.
        CatalogFailed = "CATALOG_FAILED", Never;
        /// UNAVAILABLE: no scheduler endpoint answers; retry after `RetryInfo`.
        SchedulerUnavailable = "SCHEDULER_UNAVAILABLE", Again;
        /// FAILED_PRECONDITION: the scheduler and this replica disagree on the pools.
        SchedulerConfigMismatch = "SCHEDULER_CONFIG_MISMATCH", Never;
        /// RESOURCE_EXHAUSTED: every key of the pool is at capacity; retry after `RetryInfo`.
        PoolFull = "POOL_FULL", Again;
        /// RESOURCE_EXHAUSTED or UNAVAILABLE: every key tried failed (429s, errors,
        /// cooldowns); `ErrorInfo` lists the attempts.
        KeysExhausted = "KEYS_EXHAUSTED", Again;
        /// INVALID_ARGUMENT: the vendor rejected the request itself; changing keys cannot help.
        VendorRejected = "VENDOR_REJECTED", Never;
        /// DEADLINE_EXCEEDED: the call's deadline ended before audio came back.
        DeadlineExceeded = "DEADLINE_EXCEEDED", Again;
        /// INTERNAL: the chunks' audio could not be joined.
        AudioJoinFailed = "AUDIO_JOIN_FAILED", Never;
        /// RESOURCE_EXHAUSTED: the audio would not fit in one response message (metadata
        /// `bytes`, `limit`): the same text never succeeds, a shorter one can.
        ResponseTooLarge = "RESPONSE_TOO_LARGE", Never;
        /// ABORTED: the vendor's stream broke after audio was sent; the call may be made again.
        VendorStreamBroken = "VENDOR_STREAM_BROKEN", Again;
        /// A stream ended early for a cause that carried no reason of its own.
        StreamInterrupted = "STREAM_INTERRUPTED", Again;
        /// INTERNAL: an adapter failed unexpectedly (a bug, logged on the server).
        AdapterFailed = "ADAPTER_FAILED", Never;
        /// RESOURCE_EXHAUSTED: at the pool's current pace the request would end after its
        /// deadline (metadata `estimate_ms`, `deadline_ms`, `backlog_characters`); refused before
        /// any vendor call, with `RetryInfo` when other requests' work is what stands in the way.
        DeadlineUnreachable = "DEADLINE_UNREACHABLE", Again;
        /// ABORTED: the caller read nothing of its stream for
        /// `synthesis.stalled_reader_timeout_ms` (metadata `stalled_ms`, `delivered_bytes`); the
        /// stream was cut off and its leases released.
        ReaderStalled = "READER_STALLED", Never;
        /// RESOURCE_EXHAUSTED: a budget covering the request is spent for its period (the
        /// scheduler's refusal passed on, metadata `budget`, `subject`, `used`, `limit`,
        /// `resets_at_ms`, `RetryInfo` until the reset). Not worth a retry before then.
        BudgetExhausted = "BUDGET_EXHAUSTED", Never;
        /// UNAVAILABLE: the pack is a managed clone with no READY clone in a scope this pool
        /// serves yet: one is being made (metadata `pack_id`, `scopes` where); retry after
        /// `RetryInfo`.
        ClonePending = "CLONE_PENDING", Again;
        /// FAILED_PRECONDITION: the pack's clone cannot be made where it would be served: the
        /// vendor refused it in a scope (metadata `pack_id`, `scope`, `error`), or the catalog
        /// refused to clone it (no clone scope, every slot taken: the message names the scope
        /// and its slots). An operator acts (DeleteClone, CloneVoice, more slots).
        CloneFailed = "CLONE_FAILED", Never;
        /// UNAVAILABLE: the usage store (`--usage-store`) did not take the attempt's usage
        /// record in time and `[usage] on_store_down = "refuse"`: the vendor was sent nothing
        /// (metadata `store`); retry after `RetryInfo`, once the store answers.
        UsageStoreUnavailable = "USAGE_STORE_UNAVAILABLE", Again;
    }
}

reasons! {
    /// The reasons of the catalog (`voxpool.catalog.v1`).
    CatalogReason {
        /// NOT_FOUND: no voice pack with this id.
        PackNotFound = "PACK_NOT_FOUND", Never;
        /// ALREADY_EXISTS: a pack with the same identity exists (metadata `existing_pack_id`).
        PackIdentityExists = "PACK_IDENTITY_EXISTS", Never;
        /// ABORTED: the update's `etag` / expected version is stale; read the pack again.
        VersionConflict = "VERSION_CONFLICT", Never;
        /// ABORTED: concurrent writes kept the update from committing; try again.
        WriteContention = "WRITE_CONTENTION", Again;
        /// FAILED_PRECONDITION: the voice pack is disabled.
        PackDisabled = "PACK_DISABLED", Never;
        /// UNAVAILABLE: the catalog database does not answer; retry after `RetryInfo`.
        DatabaseUnavailable = "DATABASE_UNAVAILABLE", Again;
        /// FAILED_PRECONDITION: the pack's provider speaks no reference audio (metadata
        /// `pack_id`, `provider`).
        ReferencesNotAccepted = "REFERENCES_NOT_ACCEPTED", Never;
        /// FAILED_PRECONDITION: the pack holds the most clips it may (metadata `limit`).
        TooManyReferences = "TOO_MANY_REFERENCES", Never;
        /// NOT_FOUND: the pack has no clip with this digest (metadata `pack_id`, `digest`).
        ReferenceNotFound = "REFERENCE_NOT_FOUND", Never;
        /// ALREADY_EXISTS: the pack already has a clip with this digest (metadata `digest`).
        ReferenceExists = "REFERENCE_EXISTS", Never;
        /// UNAVAILABLE: the blob store that keeps reference clips does not answer.
        BlobStoreUnavailable = "BLOB_STORE_UNAVAILABLE", Again;
        /// RESOURCE_EXHAUSTED: the most clips decoded at once are in progress; retry after `RetryInfo`.
        ClipUploadsBusy = "CLIP_UPLOADS_BUSY", Again;
        /// UNAVAILABLE: the usage ledger is not served here (no `--usage-store`) or its
        /// store does not answer.
        UsageUnavailable = "USAGE_UNAVAILABLE", Again;
        /// FAILED_PRECONDITION: GetUsage matched more rows than it answers (metadata
        /// `limit`); page through them with ListUsage or narrow the query.
        UsageTooManyRows = "USAGE_TOO_MANY_ROWS", Never;
        /// FAILED_PRECONDITION: the pack is no managed clone (kind CLONED with reference clips,
        /// no voice_id and no upstream_ids), so the catalog does not clone it (metadata
        /// `pack_id`).
        CloneNotManaged = "CLONE_NOT_MANAGED", Never;
        /// FAILED_PRECONDITION: the pack's pool declares no clone scope (no upstream has a
        /// `clone` table), or the catalog runs without the pools file (metadata `pool`).
        NoCloneScopes = "NO_CLONE_SCOPES", Never;
        /// RESOURCE_EXHAUSTED: the clone scope holds as many clones as it has slots (metadata
        /// `scope`, `slots`); delete a clone there or pick another scope.
        CloneSlotsFull = "CLONE_SLOTS_FULL", Never;
        /// NOT_FOUND: the pack has no clone in this scope (metadata `pack_id`, `scope`).
        CloneNotFound = "CLONE_NOT_FOUND", Never;
        /// FAILED_PRECONDITION: a clone work report carries a lease token that is no longer
        /// the step's (the lease ran out and another worker took it): drop the result.
        CloneLeaseLost = "CLONE_LEASE_LOST", Never;
    }
}

reasons! {
    /// The reasons of the jobs service (`voxpool.jobs.v1.Jobs`), and of the items it fails
    /// itself (`JobItem.error.reason`).
    JobsReason {
        /// NOT_FOUND: no such job (never created, deleted, or past its retention).
        JobNotFound = "JOB_NOT_FOUND", Never;
        /// NOT_FOUND: the job has no item with this id.
        ItemNotFound = "ITEM_NOT_FOUND", Never;
        /// FAILED_PRECONDITION: CancelJob of a job that already SUCCEEDED or FAILED.
        JobFinished = "JOB_FINISHED", Never;
        /// ALREADY_EXISTS: the tenant's `request_id` names a job with other items, format or
        /// sample rate (metadata `job`): a new request needs a new request id.
        RequestIdReused = "REQUEST_ID_REUSED", Never;
        /// FAILED_PRECONDITION: DeleteJob of a job with items queued or in flight.
        JobNotFinished = "JOB_NOT_FINISHED", Never;
        /// FAILED_PRECONDITION: ReadJobItemAudio of an item that has not succeeded.
        ItemNotSucceeded = "ITEM_NOT_SUCCEEDED", Never;
        /// FAILED_PRECONDITION: the job's results are in another blob store than this
        /// replica's (a replica started with another `--blob-store`).
        OtherBlobStore = "OTHER_BLOB_STORE", Never;
        /// NOT_FOUND: the item succeeded but its audio is no longer in the blob store.
        AudioGone = "AUDIO_GONE", Never;
        /// FAILED_PRECONDITION: a `webhook_url` while the server has no webhook secret.
        WebhookSecretMissing = "WEBHOOK_SECRET_MISSING", Never;
        /// NOT_FOUND: `manifest_uri` names no object of the blob store.
        ManifestNotFound = "MANIFEST_NOT_FOUND", Never;
        /// UNAVAILABLE: the job store (Redis) does not answer; retry with the same request_id.
        StoreUnavailable = "STORE_UNAVAILABLE", Again;
        /// UNAVAILABLE: the job was written but no replica acknowledged it in time; retry with
        /// the same request_id (it answers the same job).
        NotReplicated = "NOT_REPLICATED", Again;
        /// UNAVAILABLE: the blob store does not answer.
        BlobStoreUnavailable = "BLOB_STORE_UNAVAILABLE", Again;
        /// An item's failure: workers that took it died `max_deliveries` times before it
        /// ended (a poison item, or a fleet that keeps crashing).
        DeliveryLimit = "DELIVERY_LIMIT", Never;
    }
}

reasons! {
    /// The reasons of the authentication every service shares (`voxpool_runtime::auth`): a
    /// client knows from them which credential to send, never from the message text. None
    /// is worth another try unchanged.
    AuthReason {
        /// UNAUTHENTICATED: the data plane needs a client token (or a client certificate) and
        /// the call sent none, or not as exactly one `authorization: Bearer <token>` entry.
        ClientTokenMissing = "CLIENT_TOKEN_MISSING", Never;
        /// UNAUTHENTICATED: the client token sent is none of the server's `[[client_tokens]]`.
        ClientTokenRejected = "CLIENT_TOKEN_REJECTED", Never;
        /// UNAUTHENTICATED: the client certificate is not signed by the server's `--tls-client-ca`.
        ClientCertificateRejected = "CLIENT_CERTIFICATE_REJECTED", Never;
        /// UNAUTHENTICATED: an admin RPC without exactly one well-formed
        /// `authorization: Bearer <admin token>` entry.
        AdminTokenMissing = "ADMIN_TOKEN_MISSING", Never;
        /// UNAUTHENTICATED: the admin token sent is not the server's.
        AdminTokenRejected = "ADMIN_TOKEN_REJECTED", Never;
        /// FAILED_PRECONDITION: the server has no admin token of its own, so it answers no
        /// admin RPC (start it with `VOXPOOL_ADMIN_TOKEN` or `--admin-token-file`).
        AdminRpcsDisabled = "ADMIN_RPCS_DISABLED", Never;
        /// PERMISSION_DENIED: a tenant the caller's token is not bound to (its entry's `tenants`).
        TenantNotAllowed = "TENANT_NOT_ALLOWED", Never;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::status::with_info;

    fn all_parse_back<R: Reason>() {
        for r in R::ALL {
            assert_eq!(R::parse(r.as_str()), Some(*r), "{r}");
            assert_eq!(r.to_string(), r.as_str());
        }
        assert_eq!(R::parse("POOL_FULLER"), None);
    }

    #[test]
    fn reasons_parse_back() {
        all_parse_back::<SchedulerReason>();
        all_parse_back::<SynthesisReason>();
        all_parse_back::<JobsReason>();
        all_parse_back::<CatalogReason>();
        all_parse_back::<AuthReason>();
    }

    #[test]
    fn the_typed_reason_decides_before_the_code() {
        let too_large = with_info(
            Code::ResourceExhausted,
            "audio over the limit",
            SynthesisReason::ResponseTooLarge.as_str(),
            HashMap::new(),
            None,
        );
        assert_eq!(
            SynthesisReason::of(&too_large),
            Some(SynthesisReason::ResponseTooLarge)
        );
        assert_eq!(retry_of::<SynthesisReason>(&too_large), Retry::Never);
        let contention = with_info(
            Code::Aborted,
            "busy",
            CatalogReason::WriteContention.as_str(),
            HashMap::new(),
            None,
        );
        assert_eq!(retry_of::<CatalogReason>(&contention), Retry::Again);
    }

    #[test]
    fn without_a_reason_the_code_decides() {
        assert_eq!(
            retry_of::<SynthesisReason>(&Status::unavailable("down")),
            Retry::Again
        );
        assert_eq!(
            retry_of::<SynthesisReason>(&Status::resource_exhausted("busy")),
            Retry::Again
        );
        assert_eq!(
            retry_of::<SynthesisReason>(&Status::invalid_argument("text")),
            Retry::Never
        );
        assert_eq!(
            retry_of::<SynthesisReason>(&Status::internal("bug")),
            Retry::Never
        );
    }
}
