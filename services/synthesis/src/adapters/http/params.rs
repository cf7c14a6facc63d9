//! Param application helpers every adapter's `check` uses (invariant 8 of docs/ARCHITECTURE.md: a snapshot param the
//! vendor cannot apply is refused with its name, never dropped or clamped: [`require_range`],
//! [`refuse_if_set`], [`refuse_unknown_extra`]).

use std::fmt::Display;

use voxpool_domain::{contract::Outcome, snapshot::Snapshot};

use super::{failure, format_name};
use crate::adapters::{AudioFormat, ParamError, VendorFailure};

/// The model to send: the snapshot's `model` when set, else the pool's.
pub fn model_of<'a>(voice: &'a Snapshot, pool_model: &'a str) -> &'a str {
    if voice.model.is_empty() {
        pool_model
    } else {
        &voice.model
    }
}

/// A refusal naming `param`, its `value` and the `provider`.
pub fn refuse(
    provider: &str,
    param: &str,
    value: impl Display,
    reason: impl Into<String>,
) -> ParamError {
    ParamError {
        param: param.to_owned(),
        value: value.to_string(),
        provider: provider.to_owned(),
        reason: reason.into(),
    }
}

/// Formats a number the way snapshots do (`10`, `1.2`, `-0` as `0`).
pub fn num(v: f64) -> String {
    voxpool_domain::snapshot::canonical_number(v)
}

/// `wire` when it is finite and within `lo..=hi`, else a refusal quoting the snapshot value
/// `given` and the accepted range (`what` describes the conversion). Never clamps.
pub fn require_range(
    provider: &str,
    param: &str,
    given: f64,
    wire: f64,
    lo: f64,
    hi: f64,
    what: &str,
) -> Result<f64, ParamError> {
    if !given.is_finite() || !wire.is_finite() {
        return Err(refuse(provider, param, num(given), "not a finite number"));
    }
    if wire < lo || wire > hi {
        return Err(refuse(
            provider,
            param,
            num(given),
            format!(
                "{what} = {} is outside the vendor's range {}..{}",
                num(wire),
                num(lo),
                num(hi)
            ),
        ));
    }
    Ok(wire)
}

/// `1 + pct/100`, computed as `(100 + pct) / 100` so whole percents give the closest double
/// (`-90` → exactly `0.1`, where `1 + -0.9` would be `0.09999…` and fail a `0.1..` range).
pub fn pct_to_ratio(pct: f64) -> f64 {
    (100.0 + pct) / 100.0
}

/// True when a relative param is unset or exactly 0 (no change): such a value is applied by
/// sending nothing, so even vendors without that control accept it.
pub fn is_neutral(v: Option<f64>) -> bool {
    v.is_none_or(|v| v == 0.0)
}

/// Refuses a relative param the vendor has no control for, unless it is neutral.
pub fn refuse_if_set(
    provider: &str,
    param: &str,
    v: Option<f64>,
    why: &str,
) -> Result<(), ParamError> {
    match v {
        Some(v) if !is_neutral(Some(v)) => Err(refuse(provider, param, num(v), why)),
        _ => Ok(()),
    }
}

/// Refuses every `extra` key not in `allowed`, naming it `extra.<key>`.
pub fn refuse_unknown_extra(
    provider: &str,
    voice: &Snapshot,
    allowed: &[&str],
) -> Result<(), ParamError> {
    match voice
        .extra
        .iter()
        .find(|(k, _)| !allowed.contains(&k.as_str()))
    {
        None => Ok(()),
        Some((k, v)) => Err(refuse(
            provider,
            &format!("extra.{k}"),
            v,
            if allowed.is_empty() {
                "this vendor takes no extra options".to_owned()
            } else {
                format!("unknown option; accepted: {}", allowed.join(", "))
            },
        )),
    }
}

/// `extra.<key>` as a number within `lo..=hi`, when present.
pub fn extra_f64(
    provider: &str,
    voice: &Snapshot,
    key: &str,
    lo: f64,
    hi: f64,
) -> Result<Option<f64>, ParamError> {
    let Some(raw) = voice.extra.get(key) else {
        return Ok(None);
    };
    let param = format!("extra.{key}");
    let v: f64 = raw.trim().parse().map_err(|_| {
        refuse(
            provider,
            &param,
            raw,
            format!("not a number; expected {}..{}", num(lo), num(hi)),
        )
    })?;
    require_range(provider, &param, v, v, lo, hi, key).map(Some)
}

/// `extra.<key>` as `true` / `false`, when present.
pub fn extra_bool(provider: &str, voice: &Snapshot, key: &str) -> Result<Option<bool>, ParamError> {
    match voice.extra.get(key).map(|s| s.trim()) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(refuse(
            provider,
            &format!("extra.{key}"),
            other,
            "expected true or false",
        )),
    }
}

/// Refuses an empty voice id.
pub fn require_voice_id(provider: &str, voice: &Snapshot) -> Result<(), ParamError> {
    if voice.voice_id.trim().is_empty() {
        return Err(refuse(
            provider,
            "voiceId",
            "\"\"",
            "a voice id is required",
        ));
    }
    Ok(())
}

/// Refuses a sample rate not in `accepted` (the vendor's list for this format).
pub fn require_sample_rate(
    provider: &str,
    format: AudioFormat,
    rate: u32,
    accepted: &[u32],
) -> Result<u32, ParamError> {
    if accepted.contains(&rate) {
        return Ok(rate);
    }
    let list = accepted
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    Err(refuse(
        provider,
        "sample_rate_hz",
        rate,
        format!("{} accepts {list} Hz", format_name(format)),
    ))
}

/// A `ParamError` found while building the request (after `check` passed, e.g. a snapshot the
/// job module did not check) as a `CLIENT_ERROR` failure.
pub fn param_failure(provider: &str, e: &ParamError) -> VendorFailure {
    failure(
        provider,
        Outcome::ClientError,
        None,
        None,
        e.to_string(),
        None,
    )
}

/// `extra` entries of a test table row.
#[cfg(test)]
pub(crate) type Extra = &'static [(&'static str, &'static str)];

/// A refusal test row: params, extra, format, sample rate, the param the refusal must name.
#[cfg(test)]
pub(crate) type Refusal = (
    voxpool_domain::snapshot::Params,
    Extra,
    AudioFormat,
    Option<u32>,
    &'static str,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_refusals_name_param_value_and_range() {
        let e = require_range("minimax", "params.rate", 3.0, 3.0, 0.5, 2.0, "speed").unwrap_err();
        assert_eq!(e.param, "params.rate");
        assert_eq!(e.value, "3");
        assert!(e.to_string().contains("minimax"), "{e}");
        assert!(e.reason.contains("0.5..2"), "{e}");
        assert!(require_range("x", "p", f64::NAN, f64::NAN, 0.0, 1.0, "p").is_err());
    }
}
