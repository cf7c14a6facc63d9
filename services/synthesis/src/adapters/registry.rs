//! Provider id -> adapter: the adapters built into the server.
//!
//! [`builtin`] is the one place a new adapter is plugged in (one `add` line). Tests build their
//! own [`Registry`] with scripted adapters and hand it to
//! [`SynthesisService::new`](crate::service::SynthesisService::new).

use std::{collections::HashMap, path::PathBuf, sync::Arc};

use voxpool_domain::provider::Provider;

use super::{VendorAdapter, espeak::EspeakAdapter};

/// Adapters by provider id (`espeak`, `openai`, …).
pub type Registry = HashMap<Provider, Arc<dyn VendorAdapter>>;

/// Settings the built-in adapters need from the command line.
#[derive(Clone, Debug)]
pub struct AdapterOptions {
    /// The espeak-ng executable (`--espeak-bin`, default `espeak-ng` from `PATH`).
    pub espeak_program: PathBuf,
}

impl Default for AdapterOptions {
    fn default() -> Self {
        Self {
            espeak_program: PathBuf::from("espeak-ng"),
        }
    }
}

/// Adds `adapter` under its own provider id (a later add for the same id replaces it).
pub fn add(registry: &mut Registry, adapter: impl VendorAdapter) {
    registry.insert(adapter.provider(), Arc::new(adapter));
}

/// Every adapter built into this server.
pub fn builtin(options: &AdapterOptions) -> Registry {
    let mut registry = Registry::new();
    add(&mut registry, EspeakAdapter::new(&options.espeak_program));
    // Cloud adapters (src/adapters/<name>.rs) plug in here, one line each, sharing one pooled
    // HTTP client.
    match super::http::shared_client() {
        Ok(client) => {
            add(&mut registry, super::openai::OpenAi::new(client.clone()));
            add(&mut registry, super::azure::Azure::new(client.clone()));
            add(
                &mut registry,
                super::volcengine::Volcengine::new(client.clone()),
            );
            add(
                &mut registry,
                super::elevenlabs::ElevenLabs::new(client.clone()),
            );
            add(&mut registry, super::minimax::MiniMax::new(client.clone()));
            add(
                &mut registry,
                super::selfhosted::SelfHosted::new(client.clone()),
            );
            add(&mut registry, super::dashscope::DashScope::new(client));
        }
        Err(e) => tracing::error!(error = %e, "cloud vendor adapters unavailable"),
    }
    registry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_registry_serves_espeak_under_its_provider_id() {
        let r = builtin(&AdapterOptions::default());
        assert_eq!(
            r.get(&Provider::Espeak).map(|a| a.provider()),
            Some(Provider::Espeak)
        );
    }
}
