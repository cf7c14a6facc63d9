//! `voxctl packs list|show|create|disable|enable`: the voice catalog from the command line.
//! Admin calls carry `authorization: Bearer $VOXPOOL_ADMIN_TOKEN`.

use std::collections::HashMap;

use tonic::{codegen::InterceptedService, transport::Channel};
use voxpool_proto::catalog::v1::{
    CreateVoicePackRequest, DisableVoicePackRequest, EnableVoicePackRequest, GetVoicePackRequest,
    ListVoicePacksRequest, Tier, VoicePack, VoiceParams,
    voice_catalog_admin_client::VoiceCatalogAdminClient, voice_catalog_client::VoiceCatalogClient,
    voice_pack::Kind,
};

use super::OpError;
use crate::connect::{self, AdminToken};

pub(super) type Admin = VoiceCatalogAdminClient<InterceptedService<Channel, AdminToken>>;

/// The catalog clients of a `packs` command.
pub struct Catalog {
    read: VoiceCatalogClient<Channel>,
    pub(super) admin: Admin,
    /// `catalog at URL`, named in every error.
    pub(super) service: String,
}

impl Catalog {
    /// Clients for the catalog at `url`, admin calls authorized with `token`.
    pub fn new(url: &str, token: Option<&str>) -> Result<Self, OpError> {
        let channel = connect::channel(url)?;
        let token = AdminToken::new(token).map_err(OpError::usage)?;
        Ok(Self {
            read: VoiceCatalogClient::new(channel.clone()),
            admin: VoiceCatalogAdminClient::with_interceptor(channel, token),
            service: format!("catalog at {url}"),
        })
    }

    /// Every pack (enabled only unless `all`, which needs the admin token), all pages.
    pub async fn list(&mut self, filter: &str, all: bool) -> Result<Vec<VoicePack>, OpError> {
        let mut packs = Vec::new();
        let mut page_token = String::new();
        loop {
            let request = ListVoicePacksRequest {
                page_size: 100,
                page_token: page_token.clone(),
                filter: filter.to_owned(),
            };
            let page = if all {
                self.admin.list_all_voice_packs(request).await
            } else {
                self.read.list_voice_packs(request).await
            }
            .map_err(|s| {
                let rpc = if all {
                    "ListAllVoicePacks"
                } else {
                    "ListVoicePacks"
                };
                OpError::status(rpc, &self.service, &s)
            })?
            .into_inner();
            packs.extend(page.voice_packs);
            if page.next_page_token.is_empty() {
                return Ok(packs);
            }
            page_token = page.next_page_token;
        }
    }

    /// One pack.
    pub async fn show(&mut self, id: &str) -> Result<VoicePack, OpError> {
        self.read
            .get_voice_pack(GetVoicePackRequest { id: id.into() })
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| OpError::status("GetVoicePack", &self.service, &s))
    }

    /// Creates a pack.
    pub async fn create(&mut self, pack: VoicePack) -> Result<VoicePack, OpError> {
        self.admin
            .create_voice_pack(CreateVoicePackRequest {
                voice_pack: Some(pack),
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| OpError::status("CreateVoicePack", &self.service, &s))
    }

    /// Disables (`enabled = false`) or enables a pack.
    pub async fn set_enabled(&mut self, id: &str, enabled: bool) -> Result<VoicePack, OpError> {
        let result = if enabled {
            self.admin
                .enable_voice_pack(EnableVoicePackRequest { id: id.into() })
                .await
        } else {
            self.admin
                .disable_voice_pack(DisableVoicePackRequest { id: id.into() })
                .await
        };
        let what = if enabled {
            "EnableVoicePack"
        } else {
            "DisableVoicePack"
        };
        result
            .map(tonic::Response::into_inner)
            .map_err(|s| OpError::status(what, &self.service, &s))
    }
}

/// The fields of a new pack, as given on the command line.
#[derive(Clone, Debug, Default)]
pub struct NewPack {
    /// Display name.
    pub display_name: String,
    /// Description.
    pub description: String,
    /// Provider id.
    pub provider: String,
    /// Vendor model.
    pub model: String,
    /// Vendor voice id.
    pub voice_id: String,
    /// TTS model id (pool).
    pub tts_model_id: String,
    /// `STANDARD` or `CLONED`.
    pub kind: String,
    /// `LITE`, `STANDARD`, `PRO` or `PREMIUM`.
    pub tier: String,
    /// Accounts holding the voice.
    pub upstream_ids: Vec<String>,
    /// BCP 47 locales.
    pub locales: Vec<String>,
    /// Relative pitch, percent.
    pub pitch_pct: Option<f64>,
    /// Speaking-rate multiplier.
    pub rate: Option<f64>,
    /// Relative volume, percent.
    pub volume_pct: Option<f64>,
    /// Vendor options, `key=value`.
    pub extra: Vec<String>,
}

impl NewPack {
    /// The proto message; errors name the bad flag.
    pub fn to_pb(&self) -> Result<VoicePack, OpError> {
        let tier = Tier::from_str_name(&self.tier.to_ascii_uppercase())
            .filter(|t| *t != Tier::Unspecified)
            .ok_or_else(|| {
                OpError::usage(format!(
                    "--tier {:?}: use LITE, STANDARD, PRO or PREMIUM",
                    self.tier
                ))
            })?;
        let kind = Kind::from_str_name(&self.kind.to_ascii_uppercase())
            .filter(|k| *k != Kind::Unspecified)
            .ok_or_else(|| {
                OpError::usage(format!("--kind {:?}: use STANDARD or CLONED", self.kind))
            })?;
        let mut extra = HashMap::new();
        for pair in &self.extra {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| OpError::usage(format!("--extra {pair:?}: use key=value")))?;
            extra.insert(k.to_owned(), v.to_owned());
        }
        Ok(VoicePack {
            display_name: self.display_name.clone(),
            description: self.description.clone(),
            provider: self.provider.clone(),
            model: self.model.clone(),
            voice_id: self.voice_id.clone(),
            tts_model_id: self.tts_model_id.clone(),
            kind: kind as i32,
            upstream_ids: self.upstream_ids.clone(),
            params: Some(VoiceParams {
                pitch_pct: self.pitch_pct,
                rate: self.rate,
                volume_pct: self.volume_pct,
            }),
            extra,
            tier: tier as i32,
            locales: self.locales.clone(),
            ..VoicePack::default()
        })
    }
}

fn tier_name(v: i32) -> &'static str {
    Tier::try_from(v).map_or("?", |t| t.as_str_name())
}

/// A table of packs, one per line, with a header.
pub fn render_list(packs: &[VoicePack]) -> String {
    let rows: Vec<[String; 8]> = packs
        .iter()
        .map(|p| {
            [
                p.id.clone(),
                p.display_name.clone(),
                p.provider.clone(),
                p.voice_id.clone(),
                p.tts_model_id.clone(),
                tier_name(p.tier).to_owned(),
                if p.enabled { "yes" } else { "no" }.to_owned(),
                p.version.to_string(),
            ]
        })
        .collect();
    let header = [
        "ID",
        "NAME",
        "PROVIDER",
        "VOICE",
        "TTS MODEL",
        "TIER",
        "ENABLED",
        "VERSION",
    ];
    crate::console::table(&header, &rows)
}

/// Every field of one pack, `name: value` per line.
pub fn render_pack(p: &VoicePack) -> String {
    let params = p.params.unwrap_or_default();
    let opt = |v: Option<f64>| v.map_or("default".to_owned(), |v| v.to_string());
    let mut extra: Vec<_> = p.extra.iter().map(|(k, v)| format!("{k}={v}")).collect();
    extra.sort();
    let fields = [
        ("id", p.id.clone()),
        ("display name", p.display_name.clone()),
        ("description", p.description.clone()),
        ("provider", p.provider.clone()),
        ("model", p.model.clone()),
        ("voice id", p.voice_id.clone()),
        ("tts model id", p.tts_model_id.clone()),
        (
            "kind",
            Kind::try_from(p.kind)
                .map_or("?", |k| k.as_str_name())
                .to_owned(),
        ),
        ("upstream ids", p.upstream_ids.join(", ")),
        ("pitch %", opt(params.pitch_pct)),
        ("rate", opt(params.rate)),
        ("volume %", opt(params.volume_pct)),
        ("extra", extra.join(", ")),
        ("tier", tier_name(p.tier).to_owned()),
        ("locales", p.locales.join(", ")),
        ("enabled", p.enabled.to_string()),
        ("version", p.version.to_string()),
        ("references", p.references.len().to_string()),
    ];
    fields
        .iter()
        .map(|(k, v)| format!("{k:<13} {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_pack_flags_map_to_the_proto_and_bad_values_name_the_flag() {
        let mut p = NewPack {
            display_name: "Alloy".into(),
            provider: "openai".into(),
            voice_id: "alloy".into(),
            tts_model_id: "openai-tts".into(),
            kind: "standard".into(),
            tier: "pro".into(),
            rate: Some(1.25),
            extra: vec!["style=calm".into()],
            ..NewPack::default()
        };
        let pb = p.to_pb().expect("valid");
        assert_eq!(pb.tier, Tier::Pro as i32);
        assert_eq!(pb.params.and_then(|x| x.rate), Some(1.25));
        assert_eq!(pb.extra["style"], "calm");
        p.tier = "gold".into();
        assert!(p.to_pb().unwrap_err().message.contains("--tier"));
    }

    #[test]
    fn the_list_is_an_aligned_table_with_a_header() {
        let pack = VoicePack {
            id: "vp_1".into(),
            display_name: "Alloy".into(),
            tier: Tier::Standard as i32,
            enabled: true,
            version: 3,
            ..VoicePack::default()
        };
        let text = render_list(&[pack]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ID    NAME"), "{text}");
        assert!(
            lines[1].starts_with("vp_1  Alloy") && lines[1].ends_with("STANDARD  yes      3"),
            "{text}"
        );
    }

    #[test]
    fn cjk_names_keep_the_columns_aligned() {
        let pack = |id: &str, name: &str| VoicePack {
            id: id.into(),
            display_name: name.into(),
            provider: "volcengine".into(),
            ..VoicePack::default()
        };
        let text = render_list(&[pack("vp_1", "温柔女声"), pack("vp_2", "Alloy")]);
        let provider_column: Vec<usize> = text
            .lines()
            .map(|line| {
                let at = line.find("volcengine").or_else(|| line.find("PROVIDER"));
                crate::console::width(&line[..at.expect("provider column")])
            })
            .collect();
        assert!(
            provider_column.windows(2).all(|w| w[0] == w[1]),
            "PROVIDER starts at the same terminal column on every line: {provider_column:?}\n{text}"
        );
    }
}
