//! The console in a real headless Chromium over WebDriver, against real processes (the
//! stack: `console/stack.rs`; the browser: `console/browser.rs`). Each test signs in and
//! drives the pages as a person would, and saves its page's screenshot (docs/CONSOLE.md).
//!
//! Synchronisation is by polling the page or the services for the awaited condition, bounded
//! by `browser::DEADLINE`; no fixed sleeps.

#[path = "console/stack.rs"]
mod stack;

#[path = "console/browser.rs"]
mod browser;

use browser::Browser;
use stack::*;
use voxpool_proto::scheduler::v1 as spb;

/// The value of the `<meter>` of `key` in `pool` on the pools page.
async fn meter(b: &Browser, pool: &str, key: &str) -> String {
    let css = format!("tr[data-key=\"{pool}|{key}\"] meter");
    b.find(&css).await;
    let value = b
        .client
        .execute(
            "return String(document.querySelector(arguments[0]).value);",
            vec![serde_json::Value::String(css)],
        )
        .await
        .expect("meter value");
    value.as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_bar_rises_while_leases_are_held_and_falls_after_without_a_reload() {
    let stack = Stack::start(false);
    let b = Browser::start().await;
    b.sign_in(&stack.url(""), ADMIN).await;
    assert_eq!(meter(&b, WATCH_POOL, WATCH_KEY).await, "0");
    // A marker a reload would lose: the bar must move by the live feed alone.
    b.client
        .execute("window.notReloaded = true; return true;", vec![])
        .await
        .expect("set marker");
    let mut scheduler = voxpool_e2e::scheduler_client(&stack.scheduler.addr).await;
    let mut leases = Vec::new();
    for i in 0..3 {
        let lease = scheduler
            .acquire(spb::AcquireRequest {
                pool: WATCH_POOL.into(),
                lease_ttl_ms: 120_000,
                request_id: format!("console-test-{i}"),
                ..Default::default()
            })
            .await
            .expect("acquire")
            .into_inner();
        leases.push(lease.lease_id);
    }
    b.until("the bar at 3 leases", || async {
        meter(&b, WATCH_POOL, WATCH_KEY).await == "3"
    })
    .await;
    let sat = b
        .find(&format!(
            "tr[data-key=\"{WATCH_POOL}|{WATCH_KEY}\"] [data-f=sat]"
        ))
        .await
        .text()
        .await
        .expect("text");
    assert_eq!(sat, "3 / 4 / 4", "in flight / effective / capacity");
    b.screenshot("pools").await;
    for lease_id in leases {
        scheduler
            .release(spb::ReleaseRequest {
                lease_id,
                ..Default::default()
            })
            .await
            .expect("release");
    }
    b.until("the bar back at 0", || async {
        meter(&b, WATCH_POOL, WATCH_KEY).await == "0"
    })
    .await;
    let kept = b
        .client
        .execute("return window.notReloaded === true;", vec![])
        .await
        .expect("read marker");
    assert_eq!(kept, serde_json::Value::Bool(true), "the page was reloaded");
}

/// The id of the seeded pack named `name`.
async fn pack_id(stack: &Stack, name: &str) -> String {
    let mut catalog = voxpool_proto::catalog::v1::voice_catalog_client::VoiceCatalogClient::new(
        voxpool_e2e::connect(&stack.catalog.addr).await,
    );
    catalog
        .list_voice_packs(voxpool_proto::catalog::v1::ListVoicePacksRequest::default())
        .await
        .expect("list packs")
        .into_inner()
        .voice_packs
        .into_iter()
        .find(|p| p.display_name == name)
        .unwrap_or_else(|| panic!("no seeded pack {name:?}"))
        .id
}

/// The tiers of the market's cards now shown.
async fn card_tiers(b: &Browser) -> Vec<String> {
    let tiers = b
        .client
        .execute(
            "return [...document.querySelectorAll('li.card')].map(c => c.dataset.tier);",
            vec![],
        )
        .await
        .expect("cards");
    serde_json::from_value(tiers).expect("a list of tiers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_market_filters_to_one_tier() {
    let stack = Stack::start(false);
    let b = Browser::start().await;
    b.sign_in(&stack.url(""), VIEWER).await;
    b.goto(&stack.url("/market")).await;
    let all = card_tiers(&b).await;
    assert!(
        all.iter().any(|t| t == "PRO") && all.iter().any(|t| t != "PRO"),
        "{all:?}"
    );
    b.find("#tier")
        .await
        .select_by_value("PRO")
        .await
        .expect("pick PRO");
    b.find("form.filters button")
        .await
        .click()
        .await
        .expect("filter");
    b.until("the market filtered to PRO", || async {
        b.client
            .current_url()
            .await
            .is_ok_and(|u| u.query() == Some("tier=PRO&locale=&provider="))
    })
    .await;
    let pro = card_tiers(&b).await;
    assert!(!pro.is_empty(), "no PRO card");
    assert!(pro.iter().all(|t| t == "PRO"), "{pro:?}");
    assert_eq!(pro.len(), all.iter().filter(|t| *t == "PRO").count());
    b.screenshot("market").await;
}

/// Audition hits counted by synthesis's cache for `pool`.
async fn cache_hits(stack: &Stack, pool: &str) -> i64 {
    let mut admin = voxpool_proto::synthesis::v1::synthesis_admin_client::SynthesisAdminClient::new(
        voxpool_e2e::connect(&stack.synthesis.addr).await,
    );
    let mut request = tonic::Request::new(voxpool_proto::synthesis::v1::GetCacheStatsRequest {});
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {ADMIN}").parse().expect("header"),
    );
    admin
        .get_cache_stats(request)
        .await
        .expect("cache stats")
        .into_inner()
        .pools
        .into_iter()
        .find(|p| p.pool == pool)
        .map_or(0, |p| p.hits)
}

/// Plays the `<audio>` of the card of `pack` and answers whether it played, then the bytes
/// its source serves (fetched by the page, base64).
async fn play_audition(b: &Browser, pack: &str) -> (bool, Vec<u8>) {
    let played = b
        .client
        .execute_async(
            r#"const [pack, done] = arguments;
            const audio = document.querySelector(`li[data-pack="${pack}"] audio`);
            audio.addEventListener("playing", () => done(true), { once: true });
            audio.addEventListener("error", () => done(false), { once: true });
            audio.play().catch(() => done(false));"#,
            vec![serde_json::Value::String(pack.to_owned())],
        )
        .await
        .expect("play");
    let bytes = b
        .client
        .execute_async(
            r#"const [pack, done] = arguments;
            const src = document.querySelector(`li[data-pack="${pack}"] audio`).src;
            fetch(src).then(r => r.arrayBuffer()).then(buf => {
                let s = ""; new Uint8Array(buf).forEach(x => s += String.fromCharCode(x));
                done(btoa(s));
            });"#,
            vec![serde_json::Value::String(pack.to_owned())],
        )
        .await
        .expect("fetch");
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(bytes.as_str().expect("base64 text"))
        .expect("base64");
    (played == serde_json::Value::Bool(true), bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audition_plays_a_wav_that_decodes_and_then_comes_from_the_audio_cache() {
    let stack = Stack::start(false);
    let pack = pack_id(&stack, "English (US), espeak-ng").await;
    let b = Browser::start().await;
    b.sign_in(&stack.url(""), VIEWER).await;
    b.goto(&stack.url("/market?provider=espeak")).await;
    let before = cache_hits(&stack, "espeak-local").await;
    let (played, wav) = play_audition(&b, &pack).await;
    assert!(played, "the audition's <audio> did not play");
    let reader = hound::WavReader::new(std::io::Cursor::new(&wav)).expect("a WAV header");
    let samples = reader
        .into_samples::<i16>()
        .collect::<Result<Vec<_>, _>>()
        .expect("WAV samples");
    assert!(
        samples.len() > 1000,
        "a short sample is more than {} samples",
        samples.len()
    );
    assert!(
        cache_hits(&stack, "espeak-local").await > before,
        "the second audition (the page's fetch after the play) did not come from the cache"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_a_card_downloads_it_with_the_snapshot_at_the_card_path() {
    let stack = Stack::start(false);
    let pack = pack_id(&stack, "English (US), espeak-ng").await;
    let card = stack.file("ada.json");
    std::fs::write(
        &card,
        r#"{"spec":"chara_card_v2","spec_version":"2.0","data":{"name":"Ada","description":"a test card","extensions":{"other":{"kept":true}}}}"#,
    )
    .expect("card");
    let b = Browser::start().await;
    b.sign_in(&stack.url(""), VIEWER).await;
    b.goto(&stack.url(&format!("/packs/{pack}"))).await;
    assert!(
        b.text().await.contains("\"packId\""),
        "the page shows the frozen snapshot"
    );
    b.screenshot("pack").await;
    b.find("#card")
        .await
        .send_keys(card.to_str().expect("utf-8 path"))
        .await
        .expect("choose the card");
    b.find("form[enctype] button")
        .await
        .click()
        .await
        .expect("bind");
    let downloaded = b.downloaded(".json").await;
    let bound: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&downloaded).expect("read"))
            .expect("the download is JSON");
    assert_eq!(bound["data"]["name"], "Ada");
    assert_eq!(bound["data"]["extensions"]["other"]["kept"], true);
    let snapshot = &bound["data"]["extensions"]["airi"]["modules"]["speech"]["voicePack"];
    assert_eq!(snapshot["packId"], pack.as_str(), "{bound}");
    assert!(
        snapshot["digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:"))
    );
}

/// Types `text` into the input `css`, replacing what it held.
async fn fill(b: &Browser, css: &str, text: &str) {
    let input = b.find(css).await;
    input.clear().await.expect("clear");
    input.send_keys(text).await.expect("type");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_form_shows_the_catalogs_message_by_the_field_until_fixed_and_takes_a_clip() {
    let stack = Stack::start(false);
    let b = Browser::start().await;
    b.sign_in(&stack.url(""), ADMIN).await;
    b.goto(&stack.url("/packs/new")).await;
    fill(&b, "#display_name", "Console test voice").await;
    b.find("#provider")
        .await
        .select_by_value("selfhosted")
        .await
        .expect("provider");
    fill(&b, "#model", "cosyvoice3").await;
    fill(&b, "#voice_id", "console-test").await;
    fill(&b, "#tts_model_id", "no-such-pool").await;
    fill(&b, "#locales", "en-US").await;
    b.find("form.pack-form button[type=submit]")
        .await
        .click()
        .await
        .expect("create");
    let message = b
        .find("#tts_model_id-error")
        .await
        .text()
        .await
        .expect("message");
    assert!(
        message.contains("no configured pool serves tts model id \"no-such-pool\""),
        "the catalog's own message by the field: {message}"
    );
    let invalid = b
        .find("#tts_model_id")
        .await
        .attr("aria-invalid")
        .await
        .expect("attr");
    assert_eq!(invalid.as_deref(), Some("true"));
    assert!(
        b.client
            .find(fantoccini::Locator::Css("#display_name-error"))
            .await
            .is_err(),
        "a good field shows no message"
    );
    b.screenshot("packs-admin-error").await;
    // What was typed is kept; fix the one bad field.
    let kept = b
        .find("#voice_id")
        .await
        .prop("value")
        .await
        .expect("value");
    assert_eq!(kept.as_deref(), Some("console-test"));
    fill(&b, "#tts_model_id", "gpu-zero-shot").await;
    b.find("form.pack-form button[type=submit]")
        .await
        .click()
        .await
        .expect("create");
    b.until("the new pack's edit page", || async {
        b.client
            .current_url()
            .await
            .is_ok_and(|u| u.path().starts_with("/packs/") && u.path().ends_with("/edit"))
    })
    .await;
    let clip = voxpool_e2e::workspace_root().join("deploy/config/clips/ada.wav");
    b.find("#audio")
        .await
        .send_keys(clip.to_str().expect("utf-8 path"))
        .await
        .expect("choose the clip");
    fill(
        &b,
        "#transcript",
        "Hello, I am Ada. This short clip is the voice a zero shot model imitates.",
    )
    .await;
    fill(&b, "#emotion", "calm").await;
    b.find("form.clip-form button")
        .await
        .click()
        .await
        .expect("upload");
    let row = b.find("tr[data-digest]").await;
    let digest = row
        .attr("data-digest")
        .await
        .expect("attr")
        .unwrap_or_default();
    assert!(digest.starts_with("sha256:"), "{digest}");
    assert!(row.text().await.expect("row").contains("calm"));
    b.screenshot("packs-admin").await;
}

/// A jobs client that authenticates as voxctl.
async fn jobs_client(
    stack: &Stack,
) -> voxpool_proto::jobs::v1::jobs_client::JobsClient<voxpool_e2e::Authed> {
    let (jobs, _) = stack.jobs.as_ref().expect("a stack with jobs");
    voxpool_proto::jobs::v1::jobs_client::JobsClient::with_interceptor(
        voxpool_e2e::connect(&jobs.addr).await,
        voxpool_e2e::voxctl_token(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_is_cancelled_from_the_jobs_page_and_the_cache_is_purged() {
    use voxpool_proto::jobs::v1 as jpb;
    let stack = Stack::start(true);
    let pack = pack_id(&stack, "English (US), espeak-ng").await;
    let mut jobs = jobs_client(&stack).await;
    let items = (0..200)
        .map(|i| jpb::JobItemSpec {
            id: format!("line-{i:03}"),
            text: format!("This is line number {i} of a long job."),
            voice: Some(jpb::job_item_spec::Voice::PackId(pack.clone())),
            ..Default::default()
        })
        .collect();
    let job = jobs
        .create_job(jpb::CreateJobRequest {
            items,
            ..Default::default()
        })
        .await
        .expect("create job")
        .into_inner();
    let id = job.name.trim_start_matches("jobs/").to_owned();
    let b = Browser::start().await;
    b.sign_in(&stack.url(""), ADMIN).await;
    // Running, with at least one item done: the progress bar has moved.
    b.until("the job running with an item done", || async {
        let job = jobs
            .clone()
            .get_job(jpb::GetJobRequest {
                name: job.name.clone(),
            })
            .await
            .expect("get job")
            .into_inner();
        job.state == jpb::job::State::Running as i32
            && job.item_counts.is_some_and(|c| c.succeeded > 0)
    })
    .await;
    b.goto(&stack.url("/jobs")).await;
    let section = format!("section[data-job=\"{id}\"]");
    let progress = b.find(&format!("{section} progress")).await;
    assert_eq!(
        progress.attr("max").await.expect("max").as_deref(),
        Some("200")
    );
    b.screenshot("jobs").await;
    b.find(&format!("{section} form[action$=\"/cancel\"] button"))
        .await
        .click()
        .await
        .expect("cancel");
    b.client.accept_alert().await.expect("confirm the cancel");
    let done = b.find("p.done").await.text().await.expect("message");
    assert!(done.contains("CANCELLED"), "{done}");
    b.until("the job cancelled", || async {
        jobs.clone()
            .get_job(jpb::GetJobRequest {
                name: job.name.clone(),
            })
            .await
            .is_ok_and(|j| j.into_inner().state == jpb::job::State::Cancelled as i32)
    })
    .await;
    // The items that succeeded, in one archive.
    b.goto(&stack.url("/jobs")).await;
    b.find(&format!("{section} a[href$=\"/archive.tar\"]"))
        .await
        .click()
        .await
        .expect("download");
    let archive = b.downloaded(".tar").await;
    let listing = std::process::Command::new("tar")
        .arg("-tf")
        .arg(&archive)
        .output()
        .expect("tar");
    let names = String::from_utf8_lossy(&listing.stdout).into_owned();
    let succeeded = jobs
        .get_job(jpb::GetJobRequest {
            name: job.name.clone(),
        })
        .await
        .expect("get job")
        .into_inner()
        .item_counts
        .expect("counts")
        .succeeded;
    assert!(listing.status.success(), "{listing:?}");
    assert_eq!(names.lines().count(), succeeded as usize, "{names}");
    assert!(
        names
            .lines()
            .all(|n| n.starts_with("line-") && n.ends_with(".wav")),
        "{names}"
    );
    // The items that ran filled the audio cache; purge the pack's entries.
    b.goto(&stack.url("/cache")).await;
    let entries: i64 = b
        .find("#cache-entries")
        .await
        .text()
        .await
        .expect("entries")
        .parse()
        .expect("a number");
    assert!(entries > 0, "the job's items are cached");
    b.screenshot("cache").await;
    fill(&b, "#pack_id", &pack).await;
    b.find("form.purge-form button")
        .await
        .click()
        .await
        .expect("purge");
    b.client.accept_alert().await.expect("confirm the purge");
    let done = b.find("p.done").await.text().await.expect("message");
    // Items in flight at the cancel may have added entries since the page was read.
    let purged: i64 = done
        .strip_prefix("Purged ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no purge count in {done:?}"));
    assert!(purged >= entries, "{done} (the page showed {entries})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_session_sees_no_admin_action_and_a_forged_post_is_refused() {
    let stack = Stack::start(false);
    let b = Browser::start().await;
    b.sign_in(&stack.url(""), VIEWER).await;
    for page in ["/pools", "/market", "/cache", "/jobs"] {
        b.goto(&stack.url(page)).await;
        let forms = b
            .client
            .execute(
                "return [...document.querySelectorAll('form[method=post]')].map(f => f.getAttribute('action'));",
                vec![],
            )
            .await
            .expect("forms");
        assert_eq!(
            forms,
            serde_json::json!(["/logout"]),
            "{page} offers a viewer an action"
        );
        assert!(!b.text().await.contains("Manage"), "{page}");
    }
    b.goto(&stack.url("/packs")).await;
    assert!(b.text().await.contains("needs an admin session"));
    // A forged post with the viewer's own valid CSRF token, from the console's own origin.
    b.goto(&stack.url("/pools")).await;
    let answer = b
        .client
        .execute_async(
            r#"const done = arguments[0];
            const csrf = document.querySelector('input[name=csrf]').value;
            const body = new URLSearchParams({ csrf, pool: "console-watch", key: "watch/key-1", action: "disable" });
            fetch("/pools/key", { method: "POST", body }).then(r => r.text().then(t => done([r.status, t])));"#,
            vec![],
        )
        .await
        .expect("forged post");
    assert_eq!(answer[0], 403, "{answer}");
    assert!(
        answer[1]
            .as_str()
            .is_some_and(|t| t.contains("needs an admin session"))
    );
    // And without the token.
    let answer = b
        .client
        .execute_async(
            r#"const done = arguments[0];
            const body = new URLSearchParams({ pool: "console-watch", key: "watch/key-1", action: "disable" });
            fetch("/pools/key", { method: "POST", body }).then(r => done(r.status));"#,
            vec![],
        )
        .await
        .expect("post without a token");
    assert_eq!(answer, 403);
    let mut scheduler = voxpool_e2e::scheduler_client(&stack.scheduler.addr).await;
    let status = scheduler
        .get_pool_status(spb::GetPoolStatusRequest {
            pool: WATCH_POOL.into(),
        })
        .await
        .expect("status")
        .into_inner();
    assert_eq!(
        status.keys[0].state,
        spb::KeyState::Available as i32,
        "the key is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_is_down_is_named_and_the_rest_of_the_console_works() {
    let mut stack = Stack::start(false);
    let b = Browser::start().await;
    b.sign_in(&stack.url(""), VIEWER).await;
    stack.catalog.child.kill().expect("stop the catalog");
    stack.catalog.child.wait().expect("reap the catalog");
    b.goto(&stack.url("/market")).await;
    let alert = b.find("[role=alert]").await.text().await.expect("alert");
    assert!(
        alert.contains("the catalog service does not answer") && alert.contains("--catalog"),
        "{alert}"
    );
    // The navigation still leads to pages the catalog does not feed.
    b.find("nav a[href=\"/pools\"]")
        .await
        .click()
        .await
        .expect("to pools");
    assert_eq!(meter(&b, WATCH_POOL, WATCH_KEY).await, "0");
}

/// The status of the watched key, as the scheduler answers it.
async fn watch_key(stack: &Stack) -> spb::KeyStatus {
    voxpool_e2e::scheduler_client(&stack.scheduler.addr)
        .await
        .get_pool_status(spb::GetPoolStatusRequest {
            pool: WATCH_POOL.into(),
        })
        .await
        .expect("status")
        .into_inner()
        .keys
        .remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_disables_a_key_sets_its_capacity_and_enables_it_each_confirmed() {
    let stack = Stack::start(false);
    let b = Browser::start().await;
    b.sign_in(&stack.url(""), ADMIN).await;
    b.find(&format!("tr[data-key=\"{WATCH_POOL}|{WATCH_KEY}\"] a"))
        .await
        .click()
        .await
        .expect("manage");
    // The key's page is the confirmation: opening it changes nothing.
    b.find("input[value=disable] ~ button").await;
    assert_eq!(
        watch_key(&stack).await.state,
        spb::KeyState::Available as i32
    );
    b.find("input[value=disable] ~ button")
        .await
        .click()
        .await
        .expect("disable");
    assert!(
        b.find("p.done")
            .await
            .text()
            .await
            .expect("done")
            .starts_with("The key is disabled")
    );
    assert_eq!(
        watch_key(&stack).await.state,
        spb::KeyState::Disabled as i32
    );
    b.find("input[value=enable] ~ button")
        .await
        .click()
        .await
        .expect("enable");
    assert!(
        b.find("p.done")
            .await
            .text()
            .await
            .expect("done")
            .starts_with("The key is enabled")
    );
    assert_eq!(
        watch_key(&stack).await.state,
        spb::KeyState::Available as i32
    );
    fill(&b, "#capacity", "2").await;
    b.find("input[value=capacity] ~ button")
        .await
        .click()
        .await
        .expect("set capacity");
    assert!(
        b.find("p.done")
            .await
            .text()
            .await
            .expect("done")
            .starts_with("The key's capacity is set")
    );
    assert_eq!(watch_key(&stack).await.capacity, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_packs_reference_clip_plays_on_its_page_as_the_wav_it_was_added_as() {
    let stack = Stack::start(false);
    let pack = pack_id(&stack, "Ada, zero-shot").await;
    let b = Browser::start().await;
    b.sign_in(&stack.url(""), VIEWER).await;
    b.goto(&stack.url(&format!("/packs/{pack}"))).await;
    b.find("audio[src*=\"/clips/\"]").await;
    // Loaded and decoded by the browser: its duration is known once its metadata is.
    let loaded = b
        .client
        .execute_async(
            r#"const [done] = arguments;
            const audio = document.querySelector('audio[src*="/clips/"]');
            audio.addEventListener("loadedmetadata", () => done(audio.duration), { once: true });
            audio.addEventListener("error", () => done(-1), { once: true });
            audio.preload = "auto";
            audio.load();"#,
            vec![],
        )
        .await
        .expect("load the clip");
    let seconds = loaded.as_f64().unwrap_or(-1.0);
    assert!(seconds > 0.5, "the clip's <audio> did not load ({loaded})");
    let fetched = b
        .client
        .execute_async(
            r#"const [done] = arguments;
            const src = document.querySelector('audio[src*="/clips/"]').src;
            fetch(src).then(async r => {
                const buf = await r.arrayBuffer();
                let s = ""; new Uint8Array(buf).forEach(x => s += String.fromCharCode(x));
                done([r.status, r.headers.get("content-type"), r.headers.get("cache-control"), btoa(s)]);
            });"#,
            vec![],
        )
        .await
        .expect("fetch the clip");
    let [status, content_type, cache, body] = fetched.as_array().expect("four values").as_slice()
    else {
        panic!("four values: {fetched}");
    };
    assert_eq!(
        (status, content_type.as_str(), cache.as_str()),
        (&serde_json::json!(200), Some("audio/wav"), Some("no-store"))
    );
    use base64::Engine as _;
    let wav = base64::engine::general_purpose::STANDARD
        .decode(body.as_str().expect("base64 text"))
        .expect("base64");
    let added = std::fs::read(voxpool_e2e::workspace_root().join("deploy/config/clips/ada.wav"))
        .expect("the seeded clip");
    assert!(wav == added, "the clip served is not the one added");
    let samples = hound::WavReader::new(std::io::Cursor::new(&wav))
        .expect("a WAV header")
        .into_samples::<i16>()
        .collect::<Result<Vec<_>, _>>()
        .expect("WAV samples");
    assert!(samples.len() > 1000, "{} samples", samples.len());
    // Without the session's cookie the clip is not served.
    let anonymous = b
        .client
        .execute_async(
            r#"const [done] = arguments;
            const src = document.querySelector('audio[src*="/clips/"]').src;
            fetch(src, { credentials: "omit", redirect: "manual" }).then(r => done(r.status));"#,
            vec![],
        )
        .await
        .expect("fetch without the session");
    assert_ne!(
        anonymous,
        serde_json::json!(200),
        "served without a session"
    );
}
