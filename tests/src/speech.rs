//! One speech stack on real binaries for tests that drive synthesis hard: a memory-store
//! scheduler, a catalog seeded with one OpenAI-compatible pack, and a synthesis with its HTTP
//! front, over a pool of keys at an OpenAI-compatible vendor (a fake the test runs).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use crate::{Service, binary, start, start_http_with_stderr};

/// The pool every stack serves.
pub const POOL: &str = "fake-speech";
/// The HTTP front's API key (tenant `readers`).
pub const HTTP_KEY: &str = "sk-speech-stack-test";

/// What to start.
#[derive(Debug)]
pub struct Options<'a> {
    /// The vendor's base URL.
    pub base_url: &'a str,
    /// Keys in the pool.
    pub keys: usize,
    /// Capacity of each key.
    pub capacity: u32,
    /// Extra lines of the `[synthesis]` table.
    pub synthesis: &'a str,
    /// `RUST_LOG` of synthesis, whose log goes to [`SpeechStack::log`].
    pub synthesis_log: &'a str,
}

/// The running stack.
pub struct SpeechStack {
    /// The scheduler.
    pub scheduler: Service,
    /// The catalog.
    pub catalog: Service,
    /// Synthesis.
    pub synthesis: Service,
    /// `http://ADDR/v1`.
    pub url: String,
    /// The seeded pack's id.
    pub pack: String,
    /// Synthesis's log file.
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl SpeechStack {
    /// Starts the stack (module doc).
    pub async fn start(options: &Options<'_>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(dir.path(), options);
        let db = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
        let packs = dir.path().join("packs.toml");
        std::fs::write(
            &packs,
            format!("[[packs]]\ndisplay_name = \"Fake Alloy\"\nprovider = \"openai\"\nmodel = \"tts-1\"\nvoice_id = \"alloy\"\ntts_model_id = \"{POOL}\"\ntier = \"STANDARD\"\n"),
        )
        .expect("packs file");
        let seeded = Command::new(binary("voxpool-catalog"))
            .args(["--database", &db, "seed"])
            .arg(&packs)
            .env("VOXPOOL_BLOB_STORE", crate::test_blob_store())
            .output()
            .expect("seed");
        assert!(seeded.status.success(), "seed: {seeded:?}");
        let mut c = Command::new(binary("voxpool-scheduler"));
        c.arg("--config")
            .arg(&config)
            .args(["--store", "memory", "--listen", "127.0.0.1:0"]);
        let scheduler = start(c);
        let mut c = Command::new(binary("voxpool-catalog"));
        c.args(["--database", &db, "--listen", "127.0.0.1:0"]);
        let catalog = start(c);
        let log = dir.path().join("synthesis.log");
        let mut c = Command::new(binary("voxpool-synthesis"));
        c.arg("--config").arg(&config).args([
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--cache",
            "off",
            "--scheduler",
            &format!("http://{}", scheduler.addr),
            "--catalog",
            &format!("http://{}", catalog.addr),
        ]);
        c.env("VOXPOOL_TEST_HTTP_KEY", HTTP_KEY)
            .env("RUST_LOG", options.synthesis_log)
            .env("NO_COLOR", "1");
        let (synthesis, url) = start_http_with_stderr(
            c,
            Stdio::from(std::fs::File::create(&log).expect("log file")),
        );
        let pack = voxpool_proto::catalog::v1::voice_catalog_client::VoiceCatalogClient::new(
            crate::connect(&catalog.addr).await,
        )
        .list_voice_packs(voxpool_proto::catalog::v1::ListVoicePacksRequest::default())
        .await
        .expect("list packs")
        .into_inner()
        .voice_packs[0]
            .id
            .clone();
        Self {
            scheduler,
            catalog,
            synthesis,
            url,
            pack,
            log,
            _dir: dir,
        }
    }

    /// `host:port` of the HTTP front.
    pub fn http_host(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/v1")
            .to_owned()
    }

    /// Lines of synthesis's log that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// A request for the pack: `text` as PCM.
    pub fn request(&self, text: &str) -> voxpool_proto::synthesis::v1::SynthesizeRequest {
        use voxpool_proto::synthesis::v1 as pb;
        pb::SynthesizeRequest {
            voice: Some(pb::synthesize_request::Voice::PackId(self.pack.clone())),
            text: text.to_owned(),
            format: pb::AudioFormat::Pcm.into(),
            ..Default::default()
        }
    }
}

fn write_config(dir: &Path, options: &Options<'_>) -> PathBuf {
    let mut t = format!(
        "[[pools]]\nid = \"{POOL}\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n\
         [[pools.upstreams]]\nid = \"u\"\nbase_url = \"{}\"\n",
        options.base_url
    );
    for k in 0..options.keys {
        let credential = dir.join(format!("k{k}"));
        std::fs::write(&credential, format!("sk-{k}\n")).expect("credential file");
        t.push_str(&format!(
            "[[pools.upstreams.keys]]\nid = \"k{k}\"\ncapacity = {}\ncredential = {{ file = \"{}\" }}\n",
            options.capacity,
            credential.display()
        ));
    }
    t.push_str(&format!(
        "[[http.api_keys]]\nkey = {{ env = \"VOXPOOL_TEST_HTTP_KEY\" }}\ntenant = \"readers\"\n\
         [scheduler]\nrecovery_window_ms = 0\n\
         [synthesis]\n{}\n",
        options.synthesis
    ));
    t.push_str(crate::CLIENT_TOKENS_TOML);
    let path = dir.join("config.toml");
    std::fs::write(&path, t).expect("config file");
    path
}

/// About `chars` characters of plain sentences (chunked at sentence ends).
pub fn long_text(chars: usize) -> String {
    (0..)
        .map(|i| {
            format!(
                "Sentence number {i:04} of a long story that keeps going, told slowly to the end. "
            )
        })
        .take_while({
            let mut total = 0;
            move |s: &String| {
                total += s.len();
                total <= chars
            }
        })
        .collect()
}
