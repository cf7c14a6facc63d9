//! Synthesis's part of the facade: auditions (a short sample spoken by a pack, through the
//! audio cache, so a second audition of the same pack costs no vendor call) and the cache's
//! stats and purge.

use voxpool_proto::synthesis::v1 as sypb;

use super::{Backend, BackendError, Service, convert, failed};
use crate::view::CacheView;

/// What an audition says, by the pack's first locale's language.
fn sample_text(locale: &str) -> &'static str {
    match locale.split(['-', '_']).next().unwrap_or("") {
        "de" => "Hallo! So klinge ich. Gefällt dir meine Stimme?",
        "fr" => "Bonjour ! Voici ma voix. Elle vous plaît ?",
        "zh" => "你好！这就是我的声音。",
        "es" => "¡Hola! Así suena mi voz.",
        _ => "Hello! This is how I sound. Do you like my voice?",
    }
}

impl Backend {
    /// A short WAV sample of pack `id` speaking (its first `locale`'s language).
    pub async fn audition(&self, id: &str, locale: &str) -> Result<Vec<u8>, BackendError> {
        let mut request = Self::request(sypb::SynthesizeRequest {
            voice: Some(sypb::synthesize_request::Voice::PackId(id.to_owned())),
            text: sample_text(locale).to_owned(),
            format: sypb::AudioFormat::Wav as i32,
            request_id: format!("console-audition-{id}"),
            cache_policy: sypb::CachePolicy::Use as i32,
            // Same seed, same clip: the second audition is the cached first one.
            seed: Some(0),
            tenant: "console".to_owned(),
            ..Default::default()
        });
        request.set_timeout(std::time::Duration::from_secs(60));
        let answer = self
            .synthesis
            .clone()
            .synthesize(request)
            .await
            .map_err(failed(Service::Synthesis))?
            .into_inner();
        Ok(answer.audio)
    }

    /// The audio cache's stats (admin API; read-only to look at).
    pub async fn cache_stats(&self) -> Result<CacheView, BackendError> {
        let stats = self
            .synthesis_admin
            .clone()
            .get_cache_stats(self.admin_request(sypb::GetCacheStatsRequest {}))
            .await
            .map_err(failed(Service::Synthesis))?
            .into_inner();
        Ok(convert::cache(stats))
    }

    /// Purges a pack's entries, or one snapshot's (admin). Answers (entries, bytes) deleted.
    pub async fn purge_cache(
        &self,
        pack_id: &str,
        snapshot_digest: &str,
    ) -> Result<(i64, i64), BackendError> {
        let answer = self
            .synthesis_admin
            .clone()
            .purge_cache(self.admin_request(sypb::PurgeCacheRequest {
                pack_id: pack_id.trim().to_owned(),
                snapshot_digest: snapshot_digest.trim().to_owned(),
            }))
            .await
            .map_err(failed(Service::Synthesis))?
            .into_inner();
        Ok((answer.deleted_entries, answer.deleted_bytes))
    }
}
