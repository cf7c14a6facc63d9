//! What a fake bills: the voice a request names (for the per-voice counts of
//! `GET /_fake/stats/voices`), and the stats endpoints.

use std::{collections::BTreeMap, sync::Arc};

use axum::{Json, extract::State};
use serde_json::Value;

use crate::control::{KeyStats, Shared};

/// The string at `path` in a JSON body; empty when there is none.
pub(crate) fn voice_in(body: &[u8], path: &[&str]) -> String {
    let Ok(mut v) = serde_json::from_slice::<Value>(body) else {
        return String::new();
    };
    for step in path {
        v = v.get(*step).cloned().unwrap_or(Value::Null);
    }
    v.as_str().unwrap_or_default().to_owned()
}

/// The `name` of an SSML body's `<voice>` element; empty when there is none.
pub(crate) fn azure_voice(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let Some(at) = text.find("<voice") else {
        return String::new();
    };
    let rest = &text[at..];
    let Some(name) = rest.find("name=") else {
        return String::new();
    };
    let rest = &rest[name + 5..];
    let Some(quote) = rest.chars().next().filter(|c| matches!(c, '"' | '\'')) else {
        return String::new();
    };
    rest[1..].split(quote).next().unwrap_or_default().to_owned()
}

/// The voice id of an ElevenLabs path (`/v1/text-to-speech/{voice_id}[/stream]`).
pub(crate) fn elevenlabs_voice(path: &str) -> String {
    path.trim_start_matches("/v1/text-to-speech/")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// `GET /_fake/stats`: the counters per key.
pub(crate) async fn stats_handler(
    State(shared): State<Arc<Shared>>,
) -> Json<BTreeMap<String, KeyStats>> {
    Json(shared.stats())
}

/// `GET /_fake/stats/voices`: characters produced per voice.
pub(crate) async fn voices_handler(
    State(shared): State<Arc<Shared>>,
) -> Json<BTreeMap<String, u64>> {
    Json(shared.voice_characters())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voices_are_read_where_each_vendor_names_them() {
        assert_eq!(
            voice_in(br#"{"input":{"voice":"v1"}}"#, &["input", "voice"]),
            "v1"
        );
        assert_eq!(voice_in(b"not json", &["voice"]), "");
        assert_eq!(
            azure_voice(b"<speak><voice name='en-US-X'>hi</voice></speak>"),
            "en-US-X"
        );
        assert_eq!(elevenlabs_voice("/v1/text-to-speech/abc/stream"), "abc");
    }
}
