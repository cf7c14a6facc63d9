//! The catalog's part of the facade: the market (enabled packs, filtered), one pack with its
//! revisions, clips and frozen snapshot, card binding, and the packs admin (create, edit,
//! disable, enable, clips).

use voxpool_domain::snapshot::Snapshot;
use voxpool_proto::catalog::v1 as cpb;

use super::{Backend, BackendError, Service, convert, failed};
use crate::view::{ClipView, PackView, RevisionView};

/// Most pages of packs read for one listing (100 packs each).
const MAX_PAGES: usize = 20;

/// The market's filters (each empty = any).
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct MarketFilter {
    /// LITE, STANDARD, PRO, PREMIUM.
    #[serde(default)]
    pub tier: String,
    /// A BCP 47 locale.
    #[serde(default)]
    pub locale: String,
    /// A provider id.
    #[serde(default)]
    pub provider: String,
}

impl MarketFilter {
    /// The catalog's filter expression (`tier=PRO AND locale=en-US`).
    pub fn expression(&self) -> String {
        [
            ("tier", &self.tier),
            ("locale", &self.locale),
            ("provider", &self.provider),
        ]
        .iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| format!("{k}={}", v.trim()))
        .collect::<Vec<_>>()
        .join(" AND ")
    }
}

/// A pack with what its page shows beside it.
#[derive(Clone, Debug)]
pub struct PackDetail {
    /// The pack.
    pub pack: PackView,
    /// Its revisions, oldest first (or why they could not be read).
    pub revisions: Result<Vec<RevisionView>, BackendError>,
    /// Its clips, removed ones included.
    pub clips: Result<Vec<ClipView>, BackendError>,
    /// Its frozen snapshot as pretty JSON (the form a card keeps), or why not (a disabled pack
    /// cannot be frozen).
    pub snapshot: Result<String, BackendError>,
}

impl Backend {
    /// The enabled packs matching `filter` (`all`: disabled ones too, through the admin API).
    pub async fn packs(
        &self,
        filter: &MarketFilter,
        all: bool,
    ) -> Result<Vec<PackView>, BackendError> {
        let mut packs = Vec::new();
        let mut page_token = String::new();
        for _ in 0..MAX_PAGES {
            let request = cpb::ListVoicePacksRequest {
                page_size: 100,
                page_token: std::mem::take(&mut page_token),
                filter: filter.expression(),
            };
            let answer = if all {
                self.catalog_admin
                    .clone()
                    .list_all_voice_packs(self.admin_request(request))
                    .await
            } else {
                self.catalog
                    .clone()
                    .list_voice_packs(Self::request(request))
                    .await
            }
            .map_err(failed(Service::Catalog))?
            .into_inner();
            packs.extend(answer.voice_packs.into_iter().map(convert::pack));
            if answer.next_page_token.is_empty() {
                break;
            }
            page_token = answer.next_page_token;
        }
        Ok(packs)
    }

    /// One pack (disabled ones too).
    pub async fn pack(&self, id: &str) -> Result<PackView, BackendError> {
        let pack = self
            .catalog
            .clone()
            .get_voice_pack(Self::request(cpb::GetVoicePackRequest {
                id: id.to_owned(),
            }))
            .await
            .map_err(failed(Service::Catalog))?
            .into_inner();
        Ok(convert::pack(pack))
    }

    /// One pack with its revisions, clips and snapshot; only the pack itself must answer.
    pub async fn pack_detail(&self, id: &str) -> Result<PackDetail, BackendError> {
        let pack = self.pack(id).await?;
        let (revisions, clips, snapshot) =
            tokio::join!(self.revisions(id), self.clips(id), self.snapshot_json(id));
        Ok(PackDetail {
            pack,
            revisions,
            clips,
            snapshot,
        })
    }

    async fn revisions(&self, id: &str) -> Result<Vec<RevisionView>, BackendError> {
        let answer = self
            .catalog_admin
            .clone()
            .list_voice_pack_revisions(self.admin_request(cpb::ListVoicePackRevisionsRequest {
                pack_id: id.to_owned(),
            }))
            .await
            .map_err(failed(Service::Catalog))?
            .into_inner();
        Ok(answer.revisions.iter().map(convert::revision).collect())
    }

    async fn clips(&self, id: &str) -> Result<Vec<ClipView>, BackendError> {
        let answer = self
            .catalog_admin
            .clone()
            .list_references(self.admin_request(cpb::ListReferencesRequest {
                pack_id: id.to_owned(),
                show_removed: true,
            }))
            .await
            .map_err(failed(Service::Catalog))?
            .into_inner();
        Ok(answer.references.into_iter().map(convert::clip).collect())
    }

    async fn snapshot_json(&self, id: &str) -> Result<String, BackendError> {
        let snapshot = self
            .catalog
            .clone()
            .freeze_snapshot(Self::request(cpb::FreezeSnapshotRequest {
                pack_id: id.to_owned(),
            }))
            .await
            .map_err(failed(Service::Catalog))?
            .into_inner();
        let value = Snapshot::from_pb(&snapshot)
            .map(|s| s.to_json_value())
            .map_err(|e| BackendError {
                service: Service::Catalog,
                code: tonic::Code::Internal,
                message: format!("answered a snapshot the console cannot read: {e}"),
                fields: Vec::new(),
            })?;
        Ok(serde_json::to_string_pretty(&value).unwrap_or_default())
    }

    /// `card_json` with pack `id`'s snapshot bound at the card path.
    pub async fn bind(&self, id: &str, card_json: String) -> Result<String, BackendError> {
        Ok(self
            .catalog
            .clone()
            .bind_voice_pack(Self::request(cpb::BindVoicePackRequest {
                pack_id: id.to_owned(),
                card_json,
            }))
            .await
            .map_err(failed(Service::Catalog))?
            .into_inner()
            .card_json)
    }

    /// Creates a pack (admin).
    pub async fn create_pack(&self, pack: cpb::VoicePack) -> Result<PackView, BackendError> {
        let pack = self
            .catalog_admin
            .clone()
            .create_voice_pack(self.admin_request(cpb::CreateVoicePackRequest {
                voice_pack: Some(pack),
            }))
            .await
            .map_err(failed(Service::Catalog))?
            .into_inner();
        Ok(convert::pack(pack))
    }

    /// Changes the fields named in `paths` (admin), refused when the pack moved past
    /// `expected_version`.
    pub async fn update_pack(
        &self,
        pack: cpb::VoicePack,
        paths: Vec<String>,
        expected_version: i64,
    ) -> Result<PackView, BackendError> {
        let pack = self
            .catalog_admin
            .clone()
            .update_voice_pack(self.admin_request(cpb::UpdateVoicePackRequest {
                voice_pack: Some(pack),
                update_mask: Some(prost_types::FieldMask { paths }),
                expected_version,
            }))
            .await
            .map_err(failed(Service::Catalog))?
            .into_inner();
        Ok(convert::pack(pack))
    }

    /// Disables (`enable` false) or enables a pack (admin).
    pub async fn set_pack_enabled(&self, id: &str, enable: bool) -> Result<PackView, BackendError> {
        let mut client = self.catalog_admin.clone();
        let id = id.to_owned();
        let answer = if enable {
            client
                .enable_voice_pack(self.admin_request(cpb::EnableVoicePackRequest { id }))
                .await
        } else {
            client
                .disable_voice_pack(self.admin_request(cpb::DisableVoicePackRequest { id }))
                .await
        };
        Ok(convert::pack(
            answer.map_err(failed(Service::Catalog))?.into_inner(),
        ))
    }

    /// Adds a reference clip (admin).
    pub async fn add_clip(
        &self,
        request: cpb::AddReferenceRequest,
    ) -> Result<ClipView, BackendError> {
        let clip = self
            .catalog_admin
            .clone()
            .add_reference(self.admin_request(request))
            .await
            .map_err(failed(Service::Catalog))?
            .into_inner();
        Ok(convert::clip(clip))
    }

    /// A reference clip's bytes and media type (admin token: the catalog's
    /// `GetReferenceAudio`).
    pub async fn clip_audio(
        &self,
        id: &str,
        digest: &str,
    ) -> Result<(Vec<u8>, String), BackendError> {
        let clip = self
            .catalog_admin
            .clone()
            .get_reference_audio(self.admin_request(cpb::GetReferenceAudioRequest {
                pack_id: id.to_owned(),
                digest: digest.to_owned(),
            }))
            .await
            .map_err(failed(Service::Catalog))?
            .into_inner();
        Ok((clip.audio, clip.content_type))
    }

    /// Removes a reference clip (admin).
    pub async fn remove_clip(&self, id: &str, digest: &str) -> Result<ClipView, BackendError> {
        let clip = self
            .catalog_admin
            .clone()
            .remove_reference(self.admin_request(cpb::RemoveReferenceRequest {
                pack_id: id.to_owned(),
                digest: digest.to_owned(),
            }))
            .await
            .map_err(failed(Service::Catalog))?
            .into_inner();
        Ok(convert::clip(clip))
    }
}
