//! MiniMax voice cloning, in the account (GroupId) of the step's key (docs/VENDORS.md, "Voice
//! cloning", MiniMax; <https://platform.minimax.io/docs/api-reference/voice-cloning-clone>).
//! Every answer is HTTP 200 with the outcome in `base_resp.status_code` (0 = success):
//! - CREATE: `POST /v1/files/upload` (multipart `purpose` = `voice_clone`, `file` = the first
//!   clip: MiniMax clones from one file), then `POST /v1/voice_clone` with `file_id` and a
//!   `voice_id` chosen here: the pack id and a random suffix (`vp_…-k3x9q2`: MiniMax wants at
//!   least 8 letters, digits, `_` or `-`, a letter first), so a retried CREATE never collides
//!   with a clone an earlier try may have made, and IMPORT reads the pack back from the id.
//!   Ready at once, `expires_at` = now + 7 days: MiniMax deletes a clone not used by a
//!   synthesis within 7 days of its creation.
//! - KEEPALIVE: one short real T2A synthesis with the clone, through the MiniMax adapter
//!   (`VendorAdapter`, open gate: not metered). MiniMax keeps a clone for good once a synthesis
//!   used it, so `ready` carries no expiry. `status_code 2054` (voice id not exist) is
//!   `expired`: cloned again on the next need, never a bad key.
//! - DELETE: `POST /v1/delete_voice` (`voice_type` `voice_cloning`); 2054 = gone already.
//! - IMPORT: `POST /v1/get_voice` (`voice_type` `voice_cloning`).
//! - POLL: `ready` (no training).
//!
//! Codes: 1002 / 1039 (rate) and 1000 / 1001 are tried again; 1004 (key) and 1008 (balance)
//! too, with the scope's next key; 2013 (invalid params, slots full) is `failed`, naming the
//! scope; 2039 (a duplicate id) is tried again with a new id.

use std::time::{Duration, SystemTime};

use reqwest::{
    Url,
    multipart::{Form, Part},
};
use serde_json::{Value, json};
use voxpool_domain::{provider::Provider, secret::Secret};

use super::{
    Outcome, Work,
    step::{self, Context, Step},
};
use crate::adapters::{
    gate::Gate,
    http::{self, HttpReply},
};

const PROVIDER: &str = Provider::MiniMax.as_str();
const DEFAULT_BASE: &str = "https://api.minimax.io";
/// MiniMax drops a clone not used by a synthesis within this long of its creation.
pub const UNUSED_LIFETIME: Duration = Duration::from_secs(7 * 86_400);

/// Runs the step (module doc).
pub async fn run(ctx: &Context, step: Step<'_>) -> Outcome {
    let secret = match http::require_secret(PROVIDER, step.key) {
        Ok(s) => s,
        Err(f) => return step::from_failure(f),
    };
    let result = match step.task.work {
        Work::Create => create(ctx, step, secret).await,
        Work::KeepAlive => keep_alive(ctx, step).await,
        Work::Delete => delete(ctx, step, secret).await,
        Work::Import => import(ctx, step, secret).await,
        Work::Poll => step.voice_id().map(|id| Outcome::Ready {
            vendor_voice_id: id.to_owned(),
            expires_at: None,
        }),
    };
    result.unwrap_or_else(|o| o)
}

/// The voice id of a new clone of `pack_id`: its letters, digits, `_` and `-` (a letter
/// first), a `-` and six random letters and digits.
pub fn new_voice_id(pack_id: &str) -> String {
    let mut id: String = pack_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect();
    if !id.starts_with(|c: char| c.is_ascii_alphabetic()) {
        id.insert(0, 'v');
    }
    let suffix: String = (0..6)
        .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rand::random_range(0..36)]))
        .collect();
    format!("{id}-{suffix}")
}

/// The pack id a voice id of [`new_voice_id`] was made from (what IMPORT binds by).
pub fn pack_of(voice_id: &str) -> &str {
    voice_id.rsplit_once('-').map_or(voice_id, |(pack, _)| pack)
}

fn url(step: &Step<'_>, path: &str) -> Result<Url, Outcome> {
    let base = http::base_url(step.upstream.base_url.as_deref(), DEFAULT_BASE);
    let mut url = Url::parse(&format!("{base}{path}")).map_err(|e| {
        step::from_failure(http::upstream_config_failure(
            PROVIDER,
            format!("upstream base_url is not a URL: {e}"),
        ))
    })?;
    if let Some(group) = http::upstream_str(&step.upstream.params, "group_id") {
        url.query_pairs_mut().append_pair("GroupId", group);
    }
    Ok(url)
}

/// Sends and reads `base_resp`: the document on code 0, else the report for the code.
async fn call(
    step: &Step<'_>,
    builder: reqwest::RequestBuilder,
    secret: &Secret,
) -> Result<Value, (Option<i64>, Outcome)> {
    let builder = builder.bearer_auth(secret.expose());
    let reply = http::send(
        PROVIDER,
        builder,
        step.timeout,
        Some(secret),
        &Gate::default(),
    )
    .await
    .map_err(|f| (None, step::from_failure(f)))?;
    let doc: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let code = doc["base_resp"]["status_code"].as_i64();
    if reply.status.is_success() && code == Some(0) {
        return Ok(doc);
    }
    Err((code, refusal(step, &reply, &doc, code, secret)))
}

fn refusal(
    step: &Step<'_>,
    reply: &HttpReply,
    doc: &Value,
    code: Option<i64>,
    secret: &Secret,
) -> Outcome {
    use voxpool_domain::contract::Outcome as V;
    let message = doc["base_resp"]["status_msg"].as_str().unwrap_or_default();
    let verdict = match code {
        Some(1002 | 1039) => Some(V::RateLimited),
        Some(1000 | 1001 | 2039) => Some(V::UpstreamError),
        Some(1004) => Some(V::KeyInvalid),
        Some(1008) => Some(V::QuotaExhausted),
        Some(2013) => Some(V::ClientError),
        _ => None,
    };
    let label = code.map(|c| format!("status_code {c}")).unwrap_or_default();
    let failure =
        http::ErrorAnswer::of(reply, label, message, verdict).failure(PROVIDER, Some(secret));
    match step::from_failure(failure) {
        Outcome::Failed(m) => Outcome::Failed(format!("scope {}: {m}", step.scope.id)),
        other => other,
    }
}

async fn create(ctx: &Context, step: Step<'_>, secret: &Secret) -> Result<Outcome, Outcome> {
    let clips = step::clips(ctx, step.task).await?;
    let Some(clip) = clips.first() else {
        return Err(Outcome::Failed("no clip to clone from".into()));
    };
    let part = Part::bytes(clip.bytes.to_vec())
        .file_name(step::file_name(0, clip))
        .mime_str(step::media_type(clip))
        .map_err(|e| Outcome::Failed(format!("clip 0: {e}")))?;
    let form = Form::new()
        .text("purpose", "voice_clone")
        .part("file", part);
    let uploaded = call(
        &step,
        ctx.http
            .post(url(&step, "/v1/files/upload")?)
            .multipart(form),
        secret,
    )
    .await
    .map_err(|(_, o)| o)?;
    let Some(file_id) = uploaded["file"]["file_id"].as_u64() else {
        return Ok(Outcome::Retry {
            after: Duration::ZERO,
            error: "minimax: files/upload answered without file.file_id".into(),
        });
    };
    let voice_id = new_voice_id(&step.task.pack_id);
    let body = json!({"file_id": file_id, "voice_id": voice_id});
    call(
        &step,
        ctx.http.post(url(&step, "/v1/voice_clone")?).json(&body),
        secret,
    )
    .await
    .map_err(|(_, o)| o)?;
    Ok(Outcome::Ready {
        vendor_voice_id: voice_id,
        expires_at: Some(SystemTime::now() + UNUSED_LIFETIME),
    })
}

async fn delete(ctx: &Context, step: Step<'_>, secret: &Secret) -> Result<Outcome, Outcome> {
    let id = step.voice_id()?;
    let body = json!({"voice_type": "voice_cloning", "voice_id": id});
    match call(
        &step,
        ctx.http.post(url(&step, "/v1/delete_voice")?).json(&body),
        secret,
    )
    .await
    {
        Ok(_) | Err((Some(2054), _)) => Ok(Outcome::Deleted),
        Err((_, outcome)) => Ok(outcome),
    }
}

async fn import(ctx: &Context, step: Step<'_>, secret: &Secret) -> Result<Outcome, Outcome> {
    let body = json!({"voice_type": "voice_cloning"});
    let doc = call(
        &step,
        ctx.http.post(url(&step, "/v1/get_voice")?).json(&body),
        secret,
    )
    .await
    .map_err(|(_, o)| o)?;
    let voices = doc["voice_cloning"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    Ok(Outcome::Imported(
        voices
            .iter()
            .filter_map(|v| v["voice_id"].as_str())
            .map(|id| (id.to_owned(), pack_of(id).to_owned()))
            .collect(),
    ))
}

async fn keep_alive(ctx: &Context, step: Step<'_>) -> Result<Outcome, Outcome> {
    let id = step.voice_id()?;
    match step::speak_once(ctx, &step, Provider::MiniMax, &step.task.model, id).await? {
        Ok(_) => Ok(Outcome::Ready {
            vendor_voice_id: id.to_owned(),
            expires_at: None,
        }),
        Err(f) if f.message.contains("status_code 2054") => Ok(Outcome::Expired {
            error: f.message,
            reclaimed: false,
        }),
        Err(f) => Ok(step::from_failure(f)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voice_ids_follow_minimax_rules_and_name_their_pack() {
        let id = new_voice_id("vp_0123456789abcdef01234567");
        assert!(id.len() >= 8 && id.starts_with("vp_0123456789abcdef01234567-"));
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
        assert_eq!(pack_of(&id), "vp_0123456789abcdef01234567");
        assert_ne!(
            id,
            new_voice_id("vp_0123456789abcdef01234567"),
            "random suffix"
        );
        let odd = new_voice_id("9 pack.id");
        assert!(odd.starts_with("v9_pack_id-"), "{odd}");
    }
}
