//! The body of `POST /v1/audio/speech`, read strictly: JSON (`Content-Type:
//! application/json`), each key once at every level, no field this server would not apply —
//! at the top level or inside an object `voice` — and every value checked. Each refusal is a
//! 400 in OpenAI's shape naming the field ([`ApiError::invalid`]); nothing is ignored.

use std::cell::RefCell;

use axum::http::{HeaderMap, header};
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::error::ApiError;
use crate::{adapters::AudioFormat, job::Overrides};

/// Refuses a body that is not declared JSON: `Content-Type` must be `application/json` (with
/// parameters such as `; charset=utf-8` or not), as OpenAI's clients send it.
pub(super) fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let declared = headers.get(header::CONTENT_TYPE).map(|v| v.to_str());
    let media = match declared {
        Some(Ok(v)) => v.split(';').next().unwrap_or_default().trim(),
        Some(Err(_)) => "(not ASCII)",
        None => "",
    };
    if media.eq_ignore_ascii_case("application/json") {
        return Ok(());
    }
    let got = if media.is_empty() {
        "none was sent".to_owned()
    } else {
        format!("got {}", voxpool_domain::untrusted::quote(media))
    };
    Err(ApiError::invalid(
        "Content-Type",
        format!("the body must be JSON, sent with `Content-Type: application/json`; {got}"),
    ))
}

/// The JSON value of `bytes`, refusing a key that appears twice in one object (which a lenient
/// reader resolves silently, taking the last): 400 naming it (`input`, `voice.id`).
fn strict_json(bytes: &[u8]) -> Result<Value, ApiError> {
    let duplicate = RefCell::new(None);
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let parsed = Strict {
        path: String::new(),
        duplicate: &duplicate,
    }
    .deserialize(&mut reader)
    .and_then(|value| reader.end().map(|()| value));
    parsed.map_err(|e| match duplicate.into_inner() {
        Some(path) => ApiError::invalid(&path, "appears twice in the body: send each field once"),
        None => ApiError::invalid(
            "body",
            format!("is not JSON ({e}): send {{\"model\": …, \"input\": …, \"voice\": …}}"),
        ),
    })
}

/// Reads a JSON value as `serde_json::Value` does, but fails on a key an object holds twice,
/// leaving its path in `duplicate`.
struct Strict<'a> {
    path: String,
    duplicate: &'a RefCell<Option<String>>,
}

impl Strict<'_> {
    fn at(&self, key: &str) -> String {
        let key: String = key.chars().take(64).collect();
        if self.path.is_empty() {
            key
        } else {
            format!("{}.{key}", self.path)
        }
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Strict {
            path: format!("{}[{}]", self.path, out.len()),
            duplicate: self.duplicate,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                *self.duplicate.borrow_mut() = Some(self.at(&key));
                return Err(serde::de::Error::custom("duplicate key"));
            }
            let value = map.next_value_seed(Strict {
                path: self.at(&key),
                duplicate: self.duplicate,
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// Slowest and fastest `speed` accepted (OpenAI's bounds).
const SPEED_RANGE: std::ops::RangeInclusive<f64> = 0.25..=4.0;

/// Longest `instructions`, in characters (OpenAI's bound).
const MAX_INSTRUCTIONS_CHARS: usize = 4096;

/// Longest `model`, in characters (it is only checked, never used).
const MAX_MODEL_CHARS: usize = 256;

/// How the audio goes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StreamFormat {
    Audio,
    Sse,
}

/// A parsed body.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SpeechBody {
    pub(super) input: String,
    pub(super) voice: String,
    pub(super) format: AudioFormat,
    /// No `response_format` was sent: `format` is OpenAI's default, mp3.
    pub(super) format_defaulted: bool,
    pub(super) overrides: Overrides,
    pub(super) stream_format: StreamFormat,
}

fn string(body: &Map<String, Value>, field: &str) -> Result<Option<String>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ApiError::invalid(
            field,
            format!("must be a string, got {}", kind(other)),
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl SpeechBody {
    /// Parses and checks the body (module doc); errors are 400 naming the field.
    pub(super) fn parse(bytes: &[u8]) -> Result<Self, ApiError> {
        let value = strict_json(bytes)?;
        let Value::Object(body) = value else {
            return Err(ApiError::invalid("body", "must be a JSON object"));
        };
        const KNOWN: [&str; 7] = [
            "model",
            "input",
            "voice",
            "response_format",
            "speed",
            "instructions",
            "stream_format",
        ];
        if let Some(unknown) = body.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            let name = voxpool_domain::untrusted::quote(unknown);
            return Err(ApiError {
                param: Some(unknown.chars().take(64).collect()),
                ..ApiError::invalid(
                    "body",
                    format!(
                        "unknown field {name}: this server applies model, input, voice, response_format, speed, instructions and stream_format, and refuses what it would not apply"
                    ),
                )
            });
        }
        if let Some(model) = string(&body, "model")?
            && model.chars().count() > MAX_MODEL_CHARS
        {
            return Err(ApiError::invalid(
                "model",
                format!("longer than {MAX_MODEL_CHARS} characters"),
            ));
        }
        let input = string(&body, "input")?
            .ok_or_else(|| ApiError::invalid("input", "missing: the text to speak"))?;
        let voice = match body.get("voice") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Object(o)) => {
                if let Some(unknown) = o.keys().find(|k| k.as_str() != "id") {
                    let field = format!("voice.{}", unknown.chars().take(64).collect::<String>());
                    return Err(ApiError::invalid(
                        &field,
                        format!(
                            "unknown field {} of an object voice: it takes only {{\"id\": \"<voice pack id>\"}}",
                            voxpool_domain::untrusted::quote(unknown)
                        ),
                    ));
                }
                match o.get("id") {
                    Some(Value::String(s)) => s.clone(),
                    _ => {
                        return Err(ApiError::invalid(
                            "voice",
                            "an object voice must be {\"id\": \"<voice pack id>\"}",
                        ));
                    }
                }
            }
            None | Some(Value::Null) => {
                return Err(ApiError::invalid(
                    "voice",
                    "missing: a voice pack id from GET /v1/audio/voices",
                ));
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    "voice",
                    format!("must be a voice pack id (a string), got {}", kind(other)),
                ));
            }
        };
        if voice.trim().is_empty() {
            return Err(ApiError::invalid(
                "voice",
                "empty: a voice pack id from GET /v1/audio/voices",
            ));
        }
        let response_format = string(&body, "response_format")?;
        let format_defaulted = response_format.is_none();
        let format = match response_format.as_deref() {
            None | Some("mp3") => AudioFormat::Mp3,
            Some("opus") => AudioFormat::OggOpus,
            Some("wav") => AudioFormat::Wav,
            Some("pcm") => AudioFormat::Pcm,
            Some(f @ ("aac" | "flac")) => {
                return Err(ApiError::invalid(
                    "response_format",
                    format!(
                        "{f} is not available here: no pool's vendor gives it; use mp3, opus, wav or pcm"
                    ),
                ));
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    "response_format",
                    format!(
                        "{} is not a format: use mp3, opus, wav or pcm",
                        voxpool_domain::untrusted::quote(other)
                    ),
                ));
            }
        };
        let rate_scale = match body.get("speed") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => {
                let speed = n.as_f64().unwrap_or(f64::NAN);
                if !SPEED_RANGE.contains(&speed) {
                    return Err(ApiError::invalid(
                        "speed",
                        format!("must be 0.25 to 4.0, got {n}"),
                    ));
                }
                Some(speed)
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    "speed",
                    format!("must be a number 0.25 to 4.0, got {}", kind(other)),
                ));
            }
        };
        let instructions = string(&body, "instructions")?.filter(|i| !i.is_empty());
        if let Some(i) = &instructions
            && i.chars().count() > MAX_INSTRUCTIONS_CHARS
        {
            return Err(ApiError::invalid(
                "instructions",
                format!("longer than {MAX_INSTRUCTIONS_CHARS} characters"),
            ));
        }
        let stream_format = match string(&body, "stream_format")?.as_deref() {
            None | Some("audio") => StreamFormat::Audio,
            Some("sse") => StreamFormat::Sse,
            Some(other) => {
                return Err(ApiError::invalid(
                    "stream_format",
                    format!(
                        "{} is not a stream format: use audio or sse",
                        voxpool_domain::untrusted::quote(other)
                    ),
                ));
            }
        };
        Ok(Self {
            input,
            voice,
            format,
            format_defaulted,
            overrides: Overrides {
                rate_scale,
                instructions,
            },
            stream_format,
        })
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    fn parse(json: &str) -> Result<SpeechBody, ApiError> {
        SpeechBody::parse(json.as_bytes())
    }

    #[test]
    fn an_openai_body_parses_with_its_defaults() {
        let b = parse(r#"{"model":"tts-1","input":"Hello.","voice":"pack-1"}"#).unwrap();
        assert_eq!(b.format, AudioFormat::Mp3, "OpenAI's default");
        assert!(b.format_defaulted);
        assert_eq!(b.stream_format, StreamFormat::Audio);
        assert_eq!(b.overrides, Overrides::default());
        let b = parse(r#"{"input":"x","voice":{"id":"pack-2"},"response_format":"opus","speed":1.5,"instructions":"calm","stream_format":"sse"}"#).unwrap();
        assert_eq!(
            (b.voice.as_str(), b.format),
            ("pack-2", AudioFormat::OggOpus)
        );
        assert!(!b.format_defaulted);
        assert_eq!(b.overrides.rate_scale, Some(1.5));
        assert_eq!(b.overrides.instructions.as_deref(), Some("calm"));
        assert_eq!(b.stream_format, StreamFormat::Sse);
    }

    #[test]
    fn bad_fields_are_refused_by_name() {
        for (body, param) in [
            (r#"{"voice":"p"}"#, "input"),
            (r#"{"input":"x"}"#, "voice"),
            (r#"{"input":"x","voice":7}"#, "voice"),
            (
                r#"{"input":"x","voice":"p","response_format":"aac"}"#,
                "response_format",
            ),
            (
                r#"{"input":"x","voice":"p","response_format":"ogg"}"#,
                "response_format",
            ),
            (r#"{"input":"x","voice":"p","speed":9}"#, "speed"),
            (r#"{"input":"x","voice":"p","speed":"fast"}"#, "speed"),
            (
                r#"{"input":"x","voice":"p","stream_format":"ws"}"#,
                "stream_format",
            ),
            (
                r#"{"input":"x","voice":"p","temperature":0.2}"#,
                "temperature",
            ),
            (r#"[1]"#, "body"),
            (r#"{"#, "body"),
            (r#"{"input":"x","voice":"p"} trailing"#, "body"),
        ] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
    }

    #[test]
    fn a_key_sent_twice_is_refused_by_name_at_any_depth() {
        for (body, param) in [
            (
                r#"{"input":"say this","voice":"p","input":"no, this"}"#,
                "input",
            ),
            (r#"{"input":"x","voice":{"id":"a","id":"b"}}"#, "voice.id"),
        ] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
            assert!(e.message.contains("twice"), "{}", e.message);
        }
    }

    #[test]
    fn an_object_voice_takes_its_id_only() {
        let e = parse(r#"{"input":"x","voice":{"id":"p","speed":2}}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("voice.speed"), "{}", e.message);
        assert_eq!(
            parse(r#"{"input":"x","voice":{"id":"p"}}"#).unwrap().voice,
            "p"
        );
    }

    #[test]
    fn only_a_json_content_type_is_taken() {
        let with = |v: Option<&'static str>| {
            let mut h = HeaderMap::new();
            if let Some(v) = v {
                h.insert(header::CONTENT_TYPE, v.parse().unwrap());
            }
            check_content_type(&h)
        };
        assert!(with(Some("application/json")).is_ok());
        assert!(with(Some("Application/JSON; charset=utf-8")).is_ok());
        for bad in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
        ] {
            let e = with(bad).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("Content-Type"), "{bad:?}");
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
        }
    }
}
