//! Upstream Mooncake's KV-event wire format (its master's ZMQ publisher,
//! the format of its KV-events RFC as of late 2026), written field for
//! field so its subscribers (NVIDIA Dynamo's KV router among them) decode
//! ours unchanged:
//!
//! - a message is three frames: an empty topic, the sequence number (8
//!   bytes, big-endian), and the payload;
//! - the payload is MessagePack: `[timestamp_ms, [event, ...], dp_rank]`;
//! - each event is a map, in this order: `event_id`, `timestamp`,
//!   `event_type` ("stored", "removed"), `type` (with legacy fields on:
//!   "BlockStored", "BlockRemoved"), `model_name`, `block_size`,
//!   `additional_salt`, `lora_name`, `tenant_id`, `backend_id`, `medium`
//!   ("cpu" or "disk"), `dp_rank`, `group_id`, `object_key` (unless
//!   turned off), `seq_hashes` (empty: the key is passed through, not
//!   parsed), `block_hashes` (legacy, empty), then for a store
//!   `base_block_idx`, `parent_hash`, `token_ids` and (legacy)
//!   `parent_block_hash`, all nil, and for a removal `base_block_idx` nil.
//!
//! A "cleared" event ("AllBlocksCleared") ends after `dp_rank`, with a nil
//! medium. One event per medium: an object held in memory and on disk is
//! stored (and removed) once per medium, as upstream does.

use rmp::encode;

/// What an event says happened to an object on one medium.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Stored,
    Removed,
    /// Everything before is void (upstream's "cleared": the feed resynced).
    Cleared,
}

/// Where the object's bytes are: upstream's two media.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Medium {
    /// A memory replica.
    Cpu,
    /// A disk replica.
    Disk,
}

impl Medium {
    pub fn name(self) -> &'static str {
        match self {
            Medium::Cpu => "cpu",
            Medium::Disk => "disk",
        }
    }

    /// The medium of a replica on `tier` ("memory", "disk": docs/EVENTS.md).
    pub fn of_tier(tier: &str) -> Medium {
        if tier == "disk" { Medium::Disk } else { Medium::Cpu }
    }
}

/// One upstream event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedEvent {
    pub event_type: EventType,
    pub medium: Medium,
    pub object_key: String,
}

impl FeedEvent {
    /// "Forget everything before this."
    pub fn cleared() -> FeedEvent {
        FeedEvent { event_type: EventType::Cleared, medium: Medium::Cpu, object_key: String::new() }
    }
}

/// The publisher's constants (upstream's `kv_events_*` flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedOptions {
    /// Names this feed to its subscribers (required upstream).
    pub backend_id: String,
    pub model_name: Option<String>,
    pub block_size: Option<u32>,
    pub additional_salt: Option<String>,
    pub lora_name: Option<String>,
    /// Upstream's default: "default".
    pub tenant_id: String,
    pub dp_rank: u32,
    /// The legacy `type`, `block_hashes` and `parent_block_hash` fields
    /// (upstream's default: on).
    pub legacy_compat: bool,
    /// The `object_key` field (upstream's default: on; without it a store
    /// or removal says nothing a router can use, so upstream skips them).
    pub emit_object_key: bool,
}

impl Default for FeedOptions {
    fn default() -> Self {
        FeedOptions {
            backend_id: String::new(),
            model_name: None,
            block_size: None,
            additional_salt: None,
            lora_name: None,
            tenant_id: "default".into(),
            dp_rank: 0,
            legacy_compat: true,
            emit_object_key: true,
        }
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail.
    let _ = encode::write_str(out, s);
}

fn write_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => write_str(out, s),
        None => write_nil(out),
    }
}

fn write_nil(out: &mut Vec<u8>) {
    let _ = encode::write_nil(out);
}

fn write_uint(out: &mut Vec<u8>, v: u64) {
    let _ = encode::write_uint(out, v);
}

/// Entries of an event's map under `opts`.
fn map_len(e: &FeedEvent, opts: &FeedOptions) -> u32 {
    let legacy = u32::from(opts.legacy_compat);
    let common = 11 + legacy; // event_id .. dp_rank
    if e.event_type == EventType::Cleared {
        return common;
    }
    let keyed = 1 + u32::from(opts.emit_object_key) + 1 + legacy; // group_id, object_key, seq_hashes, block_hashes
    let tail = match e.event_type {
        EventType::Stored => 3 + legacy,
        EventType::Removed | EventType::Cleared => 1,
    };
    common + keyed + tail
}

/// Appends one event's map.
fn write_event(out: &mut Vec<u8>, event_id: u64, ts_ms: i64, e: &FeedEvent, opts: &FeedOptions) {
    let _ = encode::write_map_len(out, map_len(e, opts));
    write_str(out, "event_id");
    write_uint(out, event_id);
    write_str(out, "timestamp");
    let _ = encode::write_sint(out, ts_ms);
    write_str(out, "event_type");
    write_str(
        out,
        match e.event_type {
            EventType::Stored => "stored",
            EventType::Removed => "removed",
            EventType::Cleared => "cleared",
        },
    );
    if opts.legacy_compat {
        write_str(out, "type");
        write_str(
            out,
            match e.event_type {
                EventType::Stored => "BlockStored",
                EventType::Removed => "BlockRemoved",
                EventType::Cleared => "AllBlocksCleared",
            },
        );
    }
    write_str(out, "model_name");
    write_opt_str(out, opts.model_name.as_deref());
    write_str(out, "block_size");
    match opts.block_size {
        Some(b) => write_uint(out, u64::from(b)),
        None => write_nil(out),
    }
    write_str(out, "additional_salt");
    write_opt_str(out, opts.additional_salt.as_deref());
    write_str(out, "lora_name");
    write_opt_str(out, opts.lora_name.as_deref());
    write_str(out, "tenant_id");
    write_str(out, if opts.tenant_id.is_empty() { "default" } else { &opts.tenant_id });
    write_str(out, "backend_id");
    write_str(out, &opts.backend_id);
    write_str(out, "medium");
    match e.event_type {
        EventType::Cleared => write_nil(out),
        _ => write_str(out, e.medium.name()),
    }
    write_str(out, "dp_rank");
    write_uint(out, u64::from(opts.dp_rank));
    if e.event_type == EventType::Cleared {
        return;
    }
    write_str(out, "group_id");
    write_nil(out);
    if opts.emit_object_key {
        write_str(out, "object_key");
        write_str(out, &e.object_key);
    }
    write_str(out, "seq_hashes");
    let _ = encode::write_array_len(out, 0);
    if opts.legacy_compat {
        write_str(out, "block_hashes");
        let _ = encode::write_array_len(out, 0);
    }
    write_str(out, "base_block_idx");
    write_nil(out);
    if e.event_type == EventType::Stored {
        write_str(out, "parent_hash");
        write_nil(out);
        write_str(out, "token_ids");
        write_nil(out);
        if opts.legacy_compat {
            write_str(out, "parent_block_hash");
            write_nil(out);
        }
    }
}

/// The payload of one message: `[ts_ms, [events], dp_rank]`; event ids
/// count up from `first_event_id`.
pub fn encode_batch(ts_ms: i64, first_event_id: u64, events: &[FeedEvent], opts: &FeedOptions) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + events.len() * 256);
    let _ = encode::write_array_len(&mut out, 3);
    let _ = encode::write_sint(&mut out, ts_ms);
    let _ = encode::write_array_len(&mut out, u32::try_from(events.len()).unwrap_or(u32::MAX));
    for (i, e) in events.iter().enumerate() {
        write_event(&mut out, first_event_id + i as u64, ts_ms, e, opts);
    }
    write_uint(&mut out, u64::from(opts.dp_rank));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal MessagePack reader for the shapes above (test only).
    fn read_value(buf: &mut &[u8]) -> String {
        let marker = rmp::decode::read_marker(buf).map_err(|_| ()).expect("a marker");
        use rmp::Marker::*;
        match marker {
            FixArray(n) => array(buf, u32::from(n)),
            Array16 | Array32 => unreachable!("small arrays only"),
            FixMap(n) => map(buf, u32::from(n)),
            Map16 => {
                let n = u16::from_be_bytes([buf[0], buf[1]]);
                *buf = &buf[2..];
                map(buf, u32::from(n))
            }
            FixStr(n) => string(buf, usize::from(n)),
            Str8 => {
                let n = usize::from(buf[0]);
                *buf = &buf[1..];
                string(buf, n)
            }
            Null => "nil".into(),
            FixPos(n) => n.to_string(),
            U8 => take_int(buf, 1),
            U16 => take_int(buf, 2),
            U32 => take_int(buf, 4),
            U64 | I64 => take_int(buf, 8),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn take_int(buf: &mut &[u8], n: usize) -> String {
        let mut v = 0u64;
        for b in &buf[..n] {
            v = (v << 8) | u64::from(*b);
        }
        *buf = &buf[n..];
        v.to_string()
    }

    fn string(buf: &mut &[u8], n: usize) -> String {
        let s = String::from_utf8(buf[..n].to_vec()).expect("utf-8");
        *buf = &buf[n..];
        format!("{s:?}")
    }

    fn array(buf: &mut &[u8], n: u32) -> String {
        let items: Vec<String> = (0..n).map(|_| read_value(buf)).collect();
        format!("[{}]", items.join(","))
    }

    fn map(buf: &mut &[u8], n: u32) -> String {
        let items: Vec<String> = (0..n).map(|_| format!("{}:{}", read_value(buf), read_value(buf))).collect();
        format!("{{{}}}", items.join(","))
    }

    #[test]
    fn a_batch_is_upstreams_array_of_maps_in_its_field_order() {
        let opts = FeedOptions { backend_id: "b1".into(), ..Default::default() };
        let stored = FeedEvent { event_type: EventType::Stored, medium: Medium::Cpu, object_key: "k".into() };
        let removed = FeedEvent { event_type: EventType::Removed, medium: Medium::Disk, object_key: "k".into() };
        let bytes = encode_batch(1_700_000_000_000, 7, &[stored, removed], &opts);
        let text = read_value(&mut bytes.as_slice());
        let ts = "1700000000000";
        let expected = format!(
            "[{ts},[{{\"event_id\":7,\"timestamp\":{ts},\"event_type\":\"stored\",\"type\":\"BlockStored\",\
             \"model_name\":nil,\"block_size\":nil,\"additional_salt\":nil,\"lora_name\":nil,\
             \"tenant_id\":\"default\",\"backend_id\":\"b1\",\"medium\":\"cpu\",\"dp_rank\":0,\"group_id\":nil,\
             \"object_key\":\"k\",\"seq_hashes\":[],\"block_hashes\":[],\"base_block_idx\":nil,\
             \"parent_hash\":nil,\"token_ids\":nil,\"parent_block_hash\":nil}},\
             {{\"event_id\":8,\"timestamp\":{ts},\"event_type\":\"removed\",\"type\":\"BlockRemoved\",\
             \"model_name\":nil,\"block_size\":nil,\"additional_salt\":nil,\"lora_name\":nil,\
             \"tenant_id\":\"default\",\"backend_id\":\"b1\",\"medium\":\"disk\",\"dp_rank\":0,\"group_id\":nil,\
             \"object_key\":\"k\",\"seq_hashes\":[],\"block_hashes\":[],\"base_block_idx\":nil}}],0]"
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn the_map_length_follows_the_options() {
        let e = FeedEvent { event_type: EventType::Stored, medium: Medium::Cpu, object_key: "k".into() };
        let r = FeedEvent { event_type: EventType::Removed, ..e.clone() };
        let default = FeedOptions::default();
        // Upstream's counts with its default flags: stored 20, removed 17.
        assert_eq!((map_len(&e, &default), map_len(&r, &default)), (20, 17));
        let lean = FeedOptions { legacy_compat: false, emit_object_key: false, ..default };
        assert_eq!((map_len(&e, &lean), map_len(&r, &lean)), (16, 14));
        let bytes = encode_batch(1, 1, &[e], &lean);
        assert!(!read_value(&mut bytes.as_slice()).contains("object_key"));
        // Upstream's cleared: 12 entries (11 without the legacy `type`).
        let cleared = FeedEvent::cleared();
        assert_eq!((map_len(&cleared, &FeedOptions::default()), map_len(&cleared, &lean)), (12, 11));
        let text = read_value(&mut encode_batch(1, 1, &[cleared], &FeedOptions::default()).as_slice());
        assert!(
            text.contains("\"event_type\":\"cleared\"") && text.contains("\"medium\":nil,\"dp_rank\":0}"),
            "{text}"
        );
    }
}
