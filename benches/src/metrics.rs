//! A node's Prometheus `/metrics`, as the probes in `examples/` read it:
//! one scrape over plain HTTP, and the mean of one histogram.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long a scrape may wait for the node's answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// The text of `GET /metrics` on `addr` (host:port of the node's HTTP port).
pub fn scrape(addr: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(SCRAPE_TIMEOUT))?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    Ok(body)
}

/// The value of gauge or counter `name` (a line without labels).
pub fn value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ')))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
}

/// The mean of histogram `name` in ms and its count, from its `_sum` and
/// `_count` lines (with `label`, those carrying that label value); `None`
/// when absent or empty.
pub fn histogram_mean_ms(text: &str, name: &str, label: Option<&str>) -> Option<(f64, f64)> {
    let pick = |suffix: &str| {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}_{suffix}")))
            .find(|l| label.is_none_or(|v| l.contains(&format!("\"{v}\""))))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let (sum, count) = (pick("sum")?, pick("count")?);
    (count > 0.0).then(|| (sum / count * 1e3, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_read_from_its_own_line_only() {
        let text = "# HELP x_bytes X\nx_bytes_total 9\nx_bytes 42\n";
        assert_eq!(value(text, "x_bytes"), Some(42.0));
        assert_eq!(value(text, "x_bytes_total"), Some(9.0));
        assert_eq!(value(text, "y"), None);
    }

    #[test]
    fn the_mean_is_the_labelled_sum_over_its_count() {
        let text = "x_seconds_sum{method=\"A\"} 0.5\nx_seconds_count{method=\"A\"} 100\n\
                    x_seconds_sum{method=\"B\"} 3\nx_seconds_count{method=\"B\"} 1\ny_seconds_count 0\ny_seconds_sum 0\n";
        assert_eq!(histogram_mean_ms(text, "x_seconds", Some("B")), Some((3000.0, 1.0)));
        assert_eq!(histogram_mean_ms(text, "x_seconds", Some("A")), Some((5.0, 100.0)));
        assert_eq!(histogram_mean_ms(text, "y_seconds", None), None, "empty");
        assert_eq!(histogram_mean_ms(text, "z_seconds", None), None, "absent");
    }
}
