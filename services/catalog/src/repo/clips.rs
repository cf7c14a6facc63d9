//! A pack's clip rows (`voice_pack_references`): read with the pack, written in the transaction
//! of the version that changes them (added clips upserted, so a clip removed earlier comes
//! back; clips left out get `remove_time_us`, never deleted: snapshots still name them).

use std::collections::HashMap;

use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait, QueryFilter, QueryOrder,
    sea_query::{Expr, OnConflict},
};

use super::{entity::reference, rows};
use crate::{
    error::CatalogError,
    model::{PackReference, VoicePack, now},
};

/// Makes the clip rows of `pack_id` match `after` (was `before`): added clips upserted as
/// part of the pack, dropped ones marked removed now.
pub(super) async fn sync_references(
    txn: &DatabaseTransaction,
    pack_id: &str,
    before: &[PackReference],
    after: &[PackReference],
) -> Result<(), CatalogError> {
    use reference::Column;
    for r in after {
        if before.iter().any(|b| b.digest == r.digest) {
            continue;
        }
        reference::Entity::insert(rows::reference_model(pack_id, r))
            .on_conflict(
                OnConflict::columns([Column::PackId, Column::Digest])
                    .update_columns([
                        Column::Transcript,
                        Column::Language,
                        Column::Emotion,
                        Column::Weight,
                        Column::DurationMs,
                        Column::MediaType,
                        Column::SizeBytes,
                        Column::AddTimeUs,
                        Column::RemoveTimeUs,
                    ])
                    .to_owned(),
            )
            .exec_without_returning(txn)
            .await?;
    }
    let removed_at = now().timestamp_micros();
    for r in before {
        if after.iter().any(|a| a.digest == r.digest) {
            continue;
        }
        reference::Entity::update_many()
            .col_expr(Column::RemoveTimeUs, Expr::val(removed_at))
            .filter(Column::PackId.eq(pack_id))
            .filter(Column::Digest.eq(r.digest.as_str()))
            .exec(txn)
            .await?;
    }
    Ok(())
}

/// The clips (part of the pack, in the order added) of each pack in `ids`.
pub(super) async fn clips_of<C: ConnectionTrait>(
    db: &C,
    ids: &[&str],
) -> Result<HashMap<String, Vec<PackReference>>, CatalogError> {
    use reference::Column;
    let mut out: HashMap<String, Vec<PackReference>> = HashMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let rows = reference::Entity::find()
        .filter(Column::PackId.is_in(ids.iter().copied()))
        .filter(Column::RemoveTimeUs.is_null())
        .order_by_asc(Column::AddTimeUs)
        .order_by_asc(Column::Digest)
        .all(db)
        .await?;
    for row in rows {
        let pack_id = row.pack_id.clone();
        out.entry(pack_id)
            .or_default()
            .push(rows::reference_from_row(row)?.reference);
    }
    Ok(out)
}

/// `packs` with their clips attached.
pub(super) async fn with_clips<C: ConnectionTrait>(
    db: &C,
    mut packs: Vec<VoicePack>,
) -> Result<Vec<VoicePack>, CatalogError> {
    let ids: Vec<&str> = packs.iter().map(|p| p.id.as_str()).collect();
    let mut clips = clips_of(db, &ids).await?;
    for pack in &mut packs {
        pack.spec.references = clips.remove(&pack.id).unwrap_or_default();
    }
    Ok(packs)
}
