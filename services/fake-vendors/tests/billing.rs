//! What the fakes bill, per voice: the text of every answer the vendor accepted (its audio
//! began, or the caller went away while the vendor worked on it), nothing for a fault.

#[macro_use]
mod common;

use std::time::Duration;

use common::{KEY, Wire, eventually};
use voxpool_fake_vendors::{FakeConfig, FakeVendor, Fault, Latency, Step, VendorKind};

const TEXT: &str = "Bill me, 你好 🎉";

fn billed(fake: &FakeVendor) -> u64 {
    fake.voice_characters().values().sum()
}

#[tokio::test]
async fn an_answer_is_billed_its_text_in_unicode_scalars_and_a_fault_nothing() {
    let fake = FakeVendor::start(FakeConfig::new(VendorKind::OpenAi))
        .await
        .expect("fake starts");
    fake.script([Step::Fail(Fault::ServerError)]);
    let refused = Wire::OpenAi
        .request(&fake, KEY, TEXT)
        .send()
        .await
        .expect("sent");
    assert_eq!(refused.status(), 503);
    assert_eq!(billed(&fake), 0, "a fault bills nothing");
    let answered = Wire::OpenAi
        .request(&fake, KEY, TEXT)
        .send()
        .await
        .expect("sent");
    assert_eq!(answered.status(), 200);
    answered.bytes().await.expect("body");
    assert_eq!(billed(&fake), TEXT.chars().count() as u64);
}

#[tokio::test]
async fn a_caller_gone_while_the_vendor_works_is_billed_still() {
    let fake = FakeVendor::start(
        FakeConfig::new(VendorKind::OpenAi).latency(Latency::Fixed(Duration::from_secs(30))),
    )
    .await
    .expect("fake starts");
    let request = Wire::OpenAi.request(&fake, KEY, TEXT).send();
    let call = tokio::spawn(request);
    fake.wait_for_requests(1).await;
    assert_eq!(billed(&fake), 0, "nothing billed while it works");
    // The caller goes away (its connection closes) long before the 30 s of work end.
    call.abort();
    eventually("the accepted work is billed", || {
        billed(&fake) == TEXT.chars().count() as u64
    })
    .await;
}
