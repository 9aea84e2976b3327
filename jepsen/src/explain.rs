//! Sentences that say why a key is not linearizable: cheap direct findings
//! (a read of a value no put wrote) checked before the search, and the
//! account of where the search got stuck.

use std::fmt::Write;

use crate::history::{KeyOps, OpKind, OpRecord, Outcome};
use crate::model::{ModelOp, describe_state};
use crate::wgl::{SearchOp, Stuck};

/// How many ops of the longest valid order to show before the stuck op.
const PREFIX_TAIL_SHOWN: usize = 3;

/// A read that no order can explain, found without searching: it returned a
/// value that no put on the key wrote, that only a failed put wrote, or that
/// was put only after the read had completed.
pub(crate) fn impossible_read(key: &str, ops: &KeyOps<'_>) -> Option<String> {
    ops.iter().find_map(|&(index, record)| match record.outcome {
        Outcome::GetOk { value: Some(value) } => unexplained_value(key, ops, index, record, value),
        _ => None,
    })
}

fn unexplained_value(key: &str, ops: &KeyOps<'_>, index: usize, read: &OpRecord, value: u64) -> Option<String> {
    let read_text = record_text((index, read));
    let Some(&(put_index, put)) = ops.iter().find(|(_, record)| record.op == OpKind::Put { value }) else {
        return Some(format!("{read_text} returned value {value}, which no put on key {key:?} wrote"));
    };
    let put_text = record_text((put_index, put));
    if put.outcome == Outcome::Fail {
        return Some(format!(
            "{read_text} returned value {value}, written only by {put_text}, which failed (not applied)"
        ));
    }
    let read_complete_ns = read.complete_ns?;
    (read_complete_ns < put.invoke_ns)
        .then(|| format!("{read_text} returned value {value} before {put_text}, which writes it, was invoked"))
}

/// Explains a failed search over `ops` (parallel to `records`).
pub(crate) fn stuck(ops: &[SearchOp], records: &[(usize, &OpRecord)], stuck: &Stuck) -> String {
    let mut text = String::new();
    let Some(blocked) = stuck.blocked else {
        let _ = write!(text, "no order of the {} ops fits the register model", ops.len());
        return text;
    };
    let model = ops[blocked].model;
    let _ = write!(
        text,
        "{} cannot take effect: the longest consistent order places {} of {} ops and leaves the key {}, \
         where the store would have answered {} (and the op had to take effect before it completed)",
        record_text(records[blocked]),
        stuck.prefix.len(),
        ops.len(),
        describe_state(stuck.state),
        model.answer_in(stuck.state),
    );
    if model.step(stuck.state).is_some() {
        text.push_str("; that answer fits, but every order of the ops concurrent with it then fails");
    }
    push_prefix_tail(&mut text, ops, records, &stuck.prefix);
    text
}

fn push_prefix_tail(text: &mut String, ops: &[SearchOp], records: &[(usize, &OpRecord)], prefix: &[usize]) {
    if prefix.is_empty() {
        return;
    }
    let shown = &prefix[prefix.len().saturating_sub(PREFIX_TAIL_SHOWN)..];
    text.push_str("; that order ends with ");
    let parts: Vec<String> = shown.iter().map(|&op| order_step(ops[op].model, records[op].0)).collect();
    text.push_str(&parts.join(", "));
}

fn order_step(model: ModelOp, index: usize) -> String {
    format!("record {index} {}", model.describe())
}

fn record_text((index, record): (usize, &OpRecord)) -> String {
    format!("record {index} ({record})")
}
