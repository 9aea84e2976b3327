//! A minimal HTTP/1.0 GET over a plain TCP socket, for tests of the
//! `/health`, `/ready`, `/leader` and `/metrics` endpoints.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `GET path` from `addr` (`host:port`): the status code and the body.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((code, body.to_string()))
}

/// One sample of a Prometheus text exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Parses the Prometheus text format strictly enough to catch malformed
/// output: every sample line is `name{k="v",…} value`, names are valid, every
/// sample's family has a `# TYPE` line before it.
pub fn parse_prometheus(text: &str) -> Result<Vec<Sample>, String> {
    let mut typed = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            let (Some(name), Some(kind)) = (it.next(), it.next()) else { return Err(format!("line {n}: bad TYPE")) };
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(format!("line {n}: unknown type {kind}"));
            }
            typed.insert(name.to_string());
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let sample = parse_sample(line).map_err(|e| format!("line {n} {line:?}: {e}"))?;
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| sample.name.strip_suffix(s).filter(|f| typed.contains(*f)))
            .unwrap_or(&sample.name);
        if !typed.contains(family) {
            return Err(format!("line {n}: {} has no # TYPE", sample.name));
        }
        out.push(sample);
    }
    Ok(out)
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let (series, value) = line.rsplit_once(' ').ok_or("no value")?;
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
    };
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}').ok_or("unclosed labels")?)?),
        None => (series, Vec::new()),
    };
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        return Err(format!("bad metric name {name:?}"));
    }
    Ok(Sample { name: name.to_string(), labels, value })
}

fn parse_labels(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or("label without =")?;
        let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).ok_or("unquoted label value")?;
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// The value of `name` with exactly these labels (in any order), if present.
pub fn sample_value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels.iter().all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|s| s.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parser_accepts_good_text_and_rejects_bad() {
        let good = "# TYPE a_total counter\na_total{m=\"x\"} 3\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 0.5\nh_count 1\n";
        let s = parse_prometheus(good).unwrap();
        assert_eq!(sample_value(&s, "a_total", &[("m", "x")]), Some(3.0));
        assert!(parse_prometheus("no_type 1\n").is_err());
        assert!(parse_prometheus("# TYPE x gauge\nx{a=b} 1\n").is_err());
        assert!(parse_prometheus("# TYPE x gauge\nx one\n").is_err());
    }
}
