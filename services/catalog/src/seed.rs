//! `voxpool-catalog seed FILE`: load packs from a TOML or JSON file, idempotent by identity.
//!
//! # Format
//! TOML: a `[[packs]]` table per pack. JSON: `{"packs": [...]}` or a bare `[...]`. Keys are
//! the snake_case proto field names; unknown keys are errors:
//!
//! ```toml
//! [[packs]]
//! display_name = "English (US), bright"   # required, 1..200 characters
//! description = "espeak-ng, a little higher and faster"
//! provider = "espeak"                     # a known adapter
//! model = "espeak-ng"
//! voice_id = "en-us"
//! tts_model_id = "espeak-local"           # the pool it runs on
//! tier = "LITE"                           # LITE | STANDARD | PRO | PREMIUM
//! kind = "STANDARD"                       # optional; CLONED needs upstream_ids and voice_id, or neither (a managed clone)
//! upstream_ids = []                       # optional
//! locales = ["en-US"]                     # optional
//! params = { pitch_pct = 10, rate = 1.1, volume_pct = 0 }   # optional, each optional
//! extra = { }                             # optional vendor options (part of the identity)
//! # optional, selfhosted packs and managed clones: reference clips, paths relative to the seed file
//! references = [{ file = "clips/ada.wav", transcript = "What the clip says.", language = "en-US", emotion = "calm", weight = 1 }]
//! replicate = { max_scopes = 3 }          # optional, managed clones only: most clone scopes at once (1..=64, default 1)
//! ```
//!
//! A pack's clips are checked like AddReference's (`crate::reference`), put into the blob
//! store (`--blob-store`) before the pack is created, and are part of its identity. Such an
//! entry is also "already present" when a pack with the same voice (identity without clips)
//! holds every one of its clips, so clips added to a seeded pack later do not make the next
//! seed create it again.
//!
//! Every entry is validated before anything is written (errors name `packs[i].field`). Then
//! each is created; an entry whose identity (provider, model, voice_id, params, extra)
//! already exists is reported with the existing pack's id and skipped, so running the same
//! file twice changes nothing.

use std::{collections::BTreeMap, path::Path};

use serde::Deserialize;
use voxpool_proto::catalog::v1 as pb;

use crate::{
    error::CatalogError,
    model::{PackReference, PackSpec, VoicePack, now},
    pools::ServedPools,
    reference::{self, ClipStore},
    repo::PackRepository,
    validate,
};

/// The file's top level.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedFile {
    packs: Vec<SeedPack>,
}

/// One `[[packs]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedPack {
    display_name: String,
    #[serde(default)]
    description: String,
    provider: String,
    model: String,
    #[serde(default)]
    voice_id: String,
    tts_model_id: String,
    tier: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    upstream_ids: Vec<String>,
    #[serde(default)]
    locales: Vec<String>,
    #[serde(default)]
    params: SeedParams,
    #[serde(default)]
    extra: BTreeMap<String, String>,
    #[serde(default)]
    references: Vec<SeedReference>,
    #[serde(default)]
    replicate: Option<SeedReplicate>,
}

/// A managed clone's `replicate = { max_scopes = N }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedReplicate {
    max_scopes: u32,
}

/// One clip of a seeded pack.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedReference {
    file: std::path::PathBuf,
    transcript: String,
    #[serde(default)]
    language: String,
    #[serde(default)]
    emotion: String,
    #[serde(default)]
    weight: u32,
}

/// A pack to seed: its content (clips included) and the clips' bytes, in `spec.references`
/// order.
#[derive(Clone, Debug)]
pub struct SeedEntry {
    /// The pack.
    pub spec: PackSpec,
    /// The bytes of each of its clips.
    pub clips: Vec<Vec<u8>>,
    /// A managed clone's `replicate.max_scopes`.
    pub max_scopes: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedParams {
    pitch_pct: Option<f64>,
    rate: Option<f64>,
    volume_pct: Option<f64>,
}

/// What one entry did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeedOutcome {
    /// A new pack was created.
    Created {
        /// Its id.
        id: String,
        /// Its display name.
        display_name: String,
    },
    /// A pack with this identity already existed; nothing was written.
    Existing {
        /// The existing pack's id.
        id: String,
        /// The entry's display name.
        display_name: String,
    },
}

impl std::fmt::Display for SeedOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SeedOutcome::Created { id, display_name } => write!(f, "created {id} {display_name:?}"),
            SeedOutcome::Existing { id, display_name } => {
                write!(f, "exists  {id} {display_name:?} (same identity; skipped)")
            }
        }
    }
}

/// Reads and validates a seed file (JSON when it ends in `.json` or starts with `{` or a
/// single `[`, else TOML), each pack also against `pools` (see [`crate::pools`]). Errors are
/// one line naming the file and entry field.
pub fn load(path: &Path, pools: &ServedPools) -> Result<Vec<SeedEntry>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read seed file {}: {e}", path.display()))?;
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    parse_at(
        &text,
        path.extension().is_some_and(|e| e == "json"),
        pools,
        base,
    )
    .map_err(|e| format!("seed file {}: {e}", path.display()))
}

/// Parses seed text (see [`load`]) and validates every entry, pools unknown, clip files
/// relative to the working directory.
pub fn parse(text: &str, json: bool) -> Result<Vec<PackSpec>, String> {
    parse_served(text, json, &ServedPools::unknown())
}

/// [`parse`], each pack also checked against `pools`.
pub fn parse_served(text: &str, json: bool, pools: &ServedPools) -> Result<Vec<PackSpec>, String> {
    parse_at(text, json, pools, Path::new("."))
        .map(|entries| entries.into_iter().map(|e| e.spec).collect())
}

/// The clips of seed entry `i`, read from files under `base` and checked.
fn clips_of(
    p: &SeedPack,
    i: usize,
    spec: &PackSpec,
    base: &Path,
) -> Result<(Vec<PackReference>, Vec<Vec<u8>>), String> {
    let mut refs = Vec::new();
    let mut bytes = Vec::new();
    if p.references.is_empty() {
        return Ok((refs, bytes));
    }
    let pack = VoicePack {
        id: format!("packs[{i}]"),
        spec: spec.clone(),
        enabled: true,
        version: 1,
        create_time: now(),
        update_time: now(),
    };
    reference::accepts(&pack).map_err(|e| format!("packs[{i}].references: {e}"))?;
    for (j, r) in p.references.iter().enumerate() {
        let field = format!("packs[{i}].references[{j}]");
        let path = base.join(&r.file);
        let audio = std::fs::read(&path)
            .map_err(|e| format!("{field}.file: cannot read {}: {e}", path.display()))?;
        let request = pb::AddReferenceRequest {
            pack_id: pack.id.clone(),
            audio,
            transcript: r.transcript.clone(),
            language: r.language.clone(),
            emotion: r.emotion.clone(),
            weight: r.weight,
        };
        let clip = reference::check_add(&request).map_err(|e| format!("{field}: {e}"))?;
        let stored = reference::stored(&clip, &pack, now().timestamp_micros())
            .map_err(|e| format!("{field}: {e}"))?;
        if refs
            .iter()
            .any(|r: &PackReference| r.digest == stored.digest)
        {
            return Err(format!("{field}: the same clip twice"));
        }
        refs.push(stored);
        bytes.push(request.audio);
    }
    Ok((refs, bytes))
}

/// [`parse_served`], clip files relative to `base`, answering the clips' bytes too.
fn parse_at(
    text: &str,
    json: bool,
    pools: &ServedPools,
    base: &Path,
) -> Result<Vec<SeedEntry>, String> {
    let head = text.trim_start();
    let packs = if head.starts_with('[') && !head.starts_with("[[") {
        serde_json::from_str::<Vec<SeedPack>>(text).map_err(|e| e.to_string())?
    } else if json || head.starts_with('{') {
        serde_json::from_str::<SeedFile>(text)
            .map_err(|e| e.to_string())?
            .packs
    } else {
        toml::from_str::<SeedFile>(text)
            .map_err(|e| e.to_string().replace('\n', " "))?
            .packs
    };
    let mut specs = Vec::with_capacity(packs.len());
    let mut problems = Vec::new();
    for (i, p) in packs.into_iter().enumerate() {
        let prefix = format!("packs[{i}]");
        match to_pb(&p, i).and_then(|m| validate::pack_spec(&m, &prefix)) {
            Ok(mut spec) => {
                let unserved = pools.check(&spec, &prefix);
                if unserved.is_empty() {
                    match replicate(&p, i).and_then(|m| Ok((clips_of(&p, i, &spec, base)?, m))) {
                        Ok(((refs, clips), max_scopes)) => {
                            spec.references = refs;
                            specs.push(SeedEntry {
                                spec,
                                clips,
                                max_scopes,
                            });
                        }
                        Err(e) => problems.push(e),
                    }
                } else {
                    problems.push(
                        CatalogError::InvalidArgument {
                            violations: unserved,
                        }
                        .to_string(),
                    );
                }
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    if problems.is_empty() {
        Ok(specs)
    } else {
        Err(problems.join("; "))
    }
}

/// Entry `i`'s `replicate.max_scopes`: only for a managed clone (kind CLONED, no voice_id, no
/// upstream_ids), 1..=64.
fn replicate(p: &SeedPack, i: usize) -> Result<Option<u32>, String> {
    let Some(r) = &p.replicate else {
        return Ok(None);
    };
    let field = format!("packs[{i}].replicate.max_scopes");
    let managed = p
        .kind
        .as_deref()
        .is_some_and(|k| k.eq_ignore_ascii_case("CLONED"))
        && p.voice_id.is_empty()
        && p.upstream_ids.is_empty();
    if !managed {
        return Err(format!(
            "{field}: only a managed clone (kind CLONED with no voice_id and no upstream_ids) is cloned into scopes"
        ));
    }
    if !(1..=64).contains(&r.max_scopes) {
        return Err(format!("{field}: must be 1..=64, got {}", r.max_scopes));
    }
    Ok(Some(r.max_scopes))
}

fn to_pb(p: &SeedPack, i: usize) -> Result<pb::VoicePack, CatalogError> {
    let tier = pb::Tier::from_str_name(&p.tier.to_ascii_uppercase())
        .filter(|t| *t != pb::Tier::Unspecified)
        .ok_or_else(|| {
            CatalogError::invalid(
                format!("packs[{i}].tier"),
                format!("expected LITE, STANDARD, PRO or PREMIUM, got {:?}", p.tier),
            )
        })?;
    let kind = match p.kind.as_deref() {
        None => pb::voice_pack::Kind::Standard,
        Some(k) => pb::voice_pack::Kind::from_str_name(&k.to_ascii_uppercase())
            .filter(|k| *k != pb::voice_pack::Kind::Unspecified)
            .ok_or_else(|| {
                CatalogError::invalid(
                    format!("packs[{i}].kind"),
                    format!("expected STANDARD or CLONED, got {k:?}"),
                )
            })?,
    };
    Ok(pb::VoicePack {
        display_name: p.display_name.clone(),
        description: p.description.clone(),
        provider: p.provider.clone(),
        model: p.model.clone(),
        voice_id: p.voice_id.clone(),
        tts_model_id: p.tts_model_id.clone(),
        kind: kind as i32,
        upstream_ids: p.upstream_ids.clone(),
        params: Some(pb::VoiceParams {
            pitch_pct: p.params.pitch_pct,
            rate: p.params.rate,
            volume_pct: p.params.volume_pct,
        }),
        extra: p.extra.clone().into_iter().collect(),
        tier: tier as i32,
        locales: p.locales.clone(),
        ..Default::default()
    })
}

/// Creates every entry that is not already in the catalog (by identity), in file order, its
/// clips put into `clips` first.
///
/// Errors: the first database or blob-store failure (entries before it stay created;
/// re-running the seed completes the rest).
pub async fn apply(
    repo: &dyn PackRepository,
    clips: &ClipStore,
    entries: Vec<SeedEntry>,
) -> Result<Vec<SeedOutcome>, CatalogError> {
    let mut outcomes = Vec::with_capacity(entries.len());
    for SeedEntry {
        spec,
        clips: bytes,
        max_scopes,
    } in entries
    {
        let display_name = spec.display_name.clone();
        let outcome = if let Some(id) = grown_from(repo, &spec).await? {
            SeedOutcome::Existing { id, display_name }
        } else {
            for (r, audio) in spec.references.iter().zip(bytes) {
                clips.put(&r.digest, audio).await?;
            }
            match repo.create(spec).await {
                Ok(pack) => SeedOutcome::Created {
                    id: pack.id,
                    display_name,
                },
                Err(CatalogError::AlreadyExists { existing_id }) => SeedOutcome::Existing {
                    id: existing_id,
                    display_name,
                },
                Err(e) => return Err(e),
            }
        };
        if let (Some(n), Some(db)) = (max_scopes, repo.database()) {
            let (SeedOutcome::Created { id, .. } | SeedOutcome::Existing { id, .. }) = &outcome;
            crate::clones::store::CloneStore::new(db)
                .set_max_scopes(id, n, now().timestamp_micros())
                .await?;
        }
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// For an entry with clips: a pack of the same voice (its identity without clips) that holds
/// every one of the entry's clips, e.g. the seeded pack after clips were added to it.
async fn grown_from(
    repo: &dyn PackRepository,
    spec: &PackSpec,
) -> Result<Option<String>, CatalogError> {
    use crate::{
        filter::{Filter, Term},
        identity::identity,
        repo::ListQuery,
    };
    if spec.references.is_empty() {
        return Ok(None);
    }
    let bare = |s: &PackSpec| {
        identity(&PackSpec {
            references: Vec::new(),
            ..s.clone()
        })
    };
    let wanted = bare(spec);
    let query = ListQuery {
        enabled_only: false,
        filter: Filter {
            terms: vec![
                Term::Provider(spec.provider.clone()),
                Term::TtsModelId(spec.tts_model_id.clone()),
            ],
        },
        after: None,
        limit: 1_000,
    };
    Ok(repo
        .list(&query)
        .await?
        .into_iter()
        .find(|pack| {
            bare(&pack.spec) == wanted
                && spec
                    .references
                    .iter()
                    .all(|r| pack.spec.references.iter().any(|p| p.digest == r.digest))
        })
        .map(|pack| pack.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_pack_is_served_by_a_pool_of_the_example_config_and_others_are_refused() {
        let config = voxpool_config::Config::from_toml_str(include_str!(
            "../../../deploy/config/example.toml"
        ))
        .expect("example config");
        let pools = ServedPools::from_config(&config, "example.toml");
        let seed = include_str!("../../../deploy/config/packs.toml");
        let base = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/config"));
        parse_at(seed, false, &pools, base).expect("every shipped pack has its pool");
        let stray = seed.replacen(
            "tts_model_id = \"espeak-local\"",
            "tts_model_id = \"espeak-locale\"",
            1,
        );
        // The stray pack's index: the `[[packs]]` tables before it.
        let at = seed
            .find("tts_model_id = \"espeak-local\"")
            .expect("a shipped espeak pack");
        let index = seed[..at].matches("[[packs]]").count() - 1;
        let e = parse_at(&stray, false, &pools, base).unwrap_err();
        assert!(
            e.contains(&format!("packs[{index}].tts_model_id")) && e.contains("\"espeak-locale\""),
            "{e}"
        );
    }

    #[test]
    fn the_shipped_seed_file_is_valid() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/config/packs.toml"
        ));
        let entries = load(path, &ServedPools::unknown()).expect("valid seed");
        let zero_shot = entries
            .iter()
            .find(|e| e.spec.provider == "selfhosted")
            .expect("a selfhosted pack");
        assert_eq!(zero_shot.spec.references.len(), 1, "with its clip");
        assert_eq!(
            zero_shot.spec.references[0].digest,
            voxpool_domain::reference::clip_digest(&zero_shot.clips[0])
        );
        let specs: Vec<PackSpec> = entries.into_iter().map(|e| e.spec).collect();
        assert!(specs.iter().filter(|s| s.provider == "espeak").count() >= 3);
        for provider in [
            "openai",
            "azure",
            "volcengine",
            "elevenlabs",
            "minimax",
            "dashscope",
        ] {
            assert!(
                specs.iter().any(|s| s.provider == provider),
                "no {provider} pack"
            );
        }
    }

    #[test]
    fn replicate_sets_a_managed_clones_max_scopes_and_is_refused_elsewhere() {
        let base = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/config"));
        let pack = |kind: &str, voice_id: &str, replicate: &str| {
            format!(
                r#"[[packs]]
display_name = "Ada"
provider = "elevenlabs"
model = "eleven_multilingual_v2"
voice_id = "{voice_id}"
tts_model_id = "elevenlabs-clones"
kind = "{kind}"
tier = "PREMIUM"
references = [{{ file = "clips/ada.wav", transcript = "Hello.", language = "en-US" }}]
replicate = {replicate}
"#
            )
        };
        let pools = ServedPools::unknown();
        let entries = parse_at(
            &pack("CLONED", "", "{ max_scopes = 3 }"),
            false,
            &pools,
            base,
        )
        .expect("a managed clone takes replicate");
        assert_eq!(entries[0].max_scopes, Some(3));
        let e = parse_at(
            &pack("CLONED", "", "{ max_scopes = 0 }"),
            false,
            &pools,
            base,
        )
        .unwrap_err();
        assert!(
            e.contains("packs[0].replicate.max_scopes: must be 1..=64"),
            "{e}"
        );
        // A hand-made clone (its voice id on the accounts it names) is not cloned by voxpool.
        let hand_made = pack("CLONED", "v1", "{ max_scopes = 2 }")
            .replace("kind = ", "upstream_ids = [\"acct\"]\nkind = ");
        let e = parse_at(&hand_made, false, &pools, base).unwrap_err();
        assert!(
            e.contains("packs[0].replicate.max_scopes: only a managed clone"),
            "{e}"
        );
    }

    #[test]
    fn json_list_and_object_forms_are_accepted() {
        let entry = r#"{"display_name":"A","provider":"espeak","model":"espeak-ng","voice_id":"de","tts_model_id":"espeak-local","tier":"lite"}"#;
        assert_eq!(parse(&format!("[{entry}]"), false).expect("list").len(), 1);
        assert_eq!(
            parse(&format!("{{\"packs\":[{entry}]}}"), true)
                .expect("object")
                .len(),
            1
        );
    }

    #[test]
    fn entry_errors_name_the_entry_and_field() {
        let text = r#"
[[packs]]
display_name = "ok"
provider = "espeak"
model = "espeak-ng"
voice_id = "en-us"
tts_model_id = "espeak-local"
tier = "LITE"

[[packs]]
display_name = "bad"
provider = "espeak"
model = "espeak-ng"
voice_id = "en-us"
tts_model_id = "espeak-local"
tier = "GOLD"
params = { rate = 9 }
"#;
        let e = parse(text, false).unwrap_err();
        assert!(e.contains("packs[1].tier"), "{e}");
        let e = parse(&text.replace("GOLD", "PRO"), false).unwrap_err();
        assert!(e.contains("packs[1].params.rate"), "{e}");
        let e = parse("[[packs]]\ndisplay_nam = \"x\"\n", false).unwrap_err();
        assert!(e.contains("display_nam"), "{e}");
    }
}
