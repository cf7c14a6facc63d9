//! Budget rows on Redis ([`Budgets`], `store::budget` doc): one hash tag per row,
//! `<prefix>:budget:{<id>:<hex subject>}`, and its reservations, amounts and test clock in the
//! same slot (`lua/budget.lua`), so every step on a row is one script on one Cluster slot. The
//! subject is hex-encoded: a caller-chosen name can never reach into another row's tag.
//!
//! A reservation waits for replica acknowledgements like a grant (`store_replica_acks`, the
//! module doc of [`super`]): one a failover could lose is let go and answered UNAVAILABLE, so
//! a promoted replica never forgets a reservation whose request went on to the vendor.
//!
//! The rows a lease reserved are noted in `<prefix>:budget-lease:{<token>}` (a STRING with
//! the lease's reservation TTL as its PX).

use async_trait::async_trait;
use redis::Value;

use super::{
    RedisStore,
    reply::{get, int, items, text},
};
use crate::{
    model::{BudgetAmount, BudgetAnswer, BudgetLimit, BudgetRow, BudgetUse, LeaseToken, Settle},
    store::{
        StoreResult,
        budget::{Budgets, decode_rows, encode_rows},
    },
};

/// The row's Redis keys under `prefix`, in the script's order.
fn row_keys(prefix: &str, row: &BudgetRow) -> [String; 4] {
    let base = format!(
        "{prefix}:budget:{{{}:{}}}",
        row.budget,
        hex::encode(&row.subject)
    );
    [
        base.clone(),
        format!("{base}:res"),
        format!("{base}:amt"),
        format!("{base}:clock"),
    ]
}

fn amount(v: &Value) -> StoreResult<u64> {
    Ok(u64::try_from(int(v)?).unwrap_or(0))
}

impl RedisStore {
    /// Runs `lua/budget.lua`'s `op` on `row`.
    async fn budget(
        &self,
        op: &str,
        row: &BudgetRow,
        token: &str,
        amount_asked: BudgetAmount,
        ms: u64,
    ) -> StoreResult<(bool, Option<BudgetLimit>, BudgetUse, i64)> {
        let mut inv = self.scripts.budget.prepare_invoke();
        for k in row_keys(&self.options.key_prefix, row) {
            inv.key(k);
        }
        inv.arg(op)
            .arg(row.per.as_str())
            .arg(row.characters)
            .arg(row.cost_micros)
            .arg(token)
            .arg(amount_asked.characters)
            .arg(amount_asked.cost_micros)
            .arg(ms);
        let reply = items(
            self.bounded("a budget script", self.conn.invoke(&inv))
                .await?,
        )?;
        let limit = match text(get(&reply, 1)?)?.as_str() {
            "characters" => Some(BudgetLimit::Characters),
            "cost" => Some(BudgetLimit::Cost),
            _ => None,
        };
        let usage = BudgetUse {
            used: BudgetAmount {
                characters: amount(get(&reply, 2)?)?,
                cost_micros: amount(get(&reply, 4)?)?,
            },
            reserved: BudgetAmount {
                characters: amount(get(&reply, 3)?)?,
                cost_micros: amount(get(&reply, 5)?)?,
            },
            resets_at_ms: int(get(&reply, 6)?)?,
            now_ms: int(get(&reply, 7)?)?,
        };
        let online = reply.get(8).map_or(Ok(0), int)?;
        Ok((int(get(&reply, 0)?)? == 1, limit, usage, online))
    }

    fn lease_note_key(&self, token: &LeaseToken) -> String {
        format!(
            "{}:budget-lease:{{{}}}",
            self.options.key_prefix,
            token.as_str()
        )
    }

    /// Waits for the replicas (as many as `online` are in sync) to hold a reservation on
    /// `row` (module doc).
    async fn budget_replicated(&self, row: &BudgetRow, online: i64) -> StoreResult<()> {
        let [key, ..] = row_keys(&self.options.key_prefix, row);
        let group = format!("budget:{}:{}", row.budget, row.subject);
        let what = format!("budget {:?}: a reservation", row.budget);
        self.replicated_at(&group, &key, &what, online).await
    }
}

#[async_trait]
impl Budgets for RedisStore {
    async fn reserve_budget(
        &self,
        row: &BudgetRow,
        token: &LeaseToken,
        amount: BudgetAmount,
        ttl_ms: u64,
    ) -> StoreResult<BudgetAnswer> {
        let (ok, limit, usage, online) = self
            .budget("reserve", row, token.as_str(), amount, ttl_ms)
            .await?;
        if !ok {
            return Ok(BudgetAnswer::Refused(
                limit.unwrap_or(BudgetLimit::Characters),
                usage,
            ));
        }
        if let Err(e) = self.budget_replicated(row, online).await {
            // Best effort: left, it expires and counts as spent (never as free).
            let _ = self.settle_budget(row, token, Settle::Nothing).await;
            return Err(e);
        }
        Ok(BudgetAnswer::Reserved(usage))
    }

    async fn settle_budget(
        &self,
        row: &BudgetRow,
        token: &LeaseToken,
        settle: Settle,
    ) -> StoreResult<()> {
        let (op, amount) = match settle {
            Settle::Charged(a) => ("charged", a),
            Settle::Nothing => ("nothing", BudgetAmount::default()),
            Settle::Reserved => ("reserved", BudgetAmount::default()),
        };
        self.budget(op, row, token.as_str(), amount, 0).await?;
        Ok(())
    }

    async fn budget_use(&self, row: &BudgetRow) -> StoreResult<BudgetUse> {
        let (_, _, usage, _) = self
            .budget("use", row, "", BudgetAmount::default(), 0)
            .await?;
        Ok(usage)
    }

    async fn note_budget_rows(
        &self,
        token: &LeaseToken,
        rows: &[(String, String)],
        ttl_ms: u64,
    ) -> StoreResult<()> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.lease_note_key(token))
            .arg(encode_rows(rows))
            .arg("PX")
            .arg(ttl_ms.max(1));
        let _: Value = self.bounded("a budget note", self.conn.query(&cmd)).await?;
        Ok(())
    }

    async fn take_budget_rows(&self, token: &LeaseToken) -> StoreResult<Vec<(String, String)>> {
        let mut cmd = redis::cmd("GETDEL");
        cmd.arg(self.lease_note_key(token));
        let raw = self.bounded("a budget note", self.conn.query(&cmd)).await?;
        Ok(match raw {
            Value::Nil => Vec::new(),
            v => decode_rows(&text(&v)?),
        })
    }

    async fn advance_budget_clock(&self, row: &BudgetRow, ms: u64) -> StoreResult<()> {
        self.budget("advance", row, "", BudgetAmount::default(), ms)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rows_keys_share_one_slot_whatever_the_subject() {
        let row = BudgetRow {
            budget: "acme-daily".into(),
            subject: "a}b{c".into(),
            per: crate::model::QuotaPeriod::Day,
            characters: 1,
            cost_micros: 0,
        };
        let keys = row_keys("vp", &row);
        let slots: std::collections::HashSet<_> = keys
            .iter()
            .map(redis::cluster_routing::Slot::for_key)
            .collect();
        assert_eq!(slots.len(), 1);
        assert!(keys[0].starts_with("vp:budget:{acme-daily:"));
    }
}
