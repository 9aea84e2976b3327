//! What the bench prints: progress on stderr while it runs (a redrawn line on
//! a terminal, one line per step otherwise, so CI logs stay readable), and at
//! the end either readable tables on stdout or one JSON document (`--json`).
//! Tables and JSON come from the same [`Table`], so they never disagree.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use serde_json::{Map, Value, json};

/// One value of a table cell.
#[derive(Clone, Debug)]
pub enum Cell {
    Int(u64),
    /// A number shown with this many decimals.
    Num(f64, usize),
    Text(String),
    /// Not measured (e.g. a skipped baseline): `-` in the table, `null` in JSON.
    Missing,
}

impl Cell {
    /// `Num` when present, `Missing` otherwise.
    pub fn opt(v: Option<f64>, decimals: usize) -> Cell {
        v.map_or(Cell::Missing, |v| Cell::Num(v, decimals))
    }

    pub fn text(s: impl Into<String>) -> Cell {
        Cell::Text(s.into())
    }

    fn render(&self) -> String {
        match self {
            Cell::Int(n) => n.to_string(),
            Cell::Num(v, d) => format!("{v:.d$}"),
            Cell::Text(s) => s.clone(),
            Cell::Missing => "-".into(),
        }
    }

    fn json(&self) -> Value {
        match self {
            Cell::Int(n) => json!(n),
            Cell::Num(v, _) if v.is_finite() => json!(v),
            Cell::Num(..) | Cell::Missing => Value::Null,
            Cell::Text(s) => json!(s),
        }
    }
}

/// A column: its JSON key and its table header.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub key: &'static str,
    pub header: &'static str,
}

/// Shorthand for a list of columns: `cols(&[("gb_per_s", "GB/s"), …])`.
pub fn cols(list: &[(&'static str, &'static str)]) -> Vec<Column> {
    list.iter().map(|&(key, header)| Column { key, header }).collect()
}

/// One table of results.
#[derive(Clone, Debug)]
pub struct Table {
    pub title: String,
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn new(title: impl Into<String>, columns: Vec<Column>) -> Self {
        Table { title: title.into(), columns, rows: Vec::new() }
    }

    /// Adds a row; it must have one cell per column.
    pub fn row(&mut self, cells: Vec<Cell>) {
        debug_assert_eq!(cells.len(), self.columns.len(), "row width of table {:?}", self.title);
        self.rows.push(cells);
    }

    /// Right-aligned columns, text columns (the first ones) left-aligned.
    pub fn render(&self) -> String {
        let cells: Vec<Vec<String>> = self.rows.iter().map(|r| r.iter().map(Cell::render).collect()).collect();
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| {
                cells
                    .iter()
                    .map(|r| r.get(i).map_or(0, String::len))
                    .max()
                    .unwrap_or(0)
                    .max(self.columns[i].header.len())
            })
            .collect();
        let left: Vec<bool> = (0..self.columns.len())
            .map(|i| self.rows.iter().all(|r| matches!(r.get(i), Some(Cell::Text(_)))))
            .collect();
        let line = |texts: Vec<&str>| {
            let parts: Vec<String> = texts
                .iter()
                .enumerate()
                .map(
                    |(i, t)| {
                        if left[i] { format!("{t:<w$}", w = widths[i]) } else { format!("{t:>w$}", w = widths[i]) }
                    },
                )
                .collect();
            parts.join("  ").trim_end().to_string()
        };
        let mut out = format!("{}\n", self.title);
        out.push_str(&line(self.columns.iter().map(|c| c.header).collect()));
        out.push('\n');
        for r in &cells {
            out.push_str(&line(r.iter().map(String::as_str).collect()));
            out.push('\n');
        }
        out
    }

    /// The number in column `key` of the first row whose cells render as
    /// `filter` says (`[("size", "4MiB"), ("clients", "1")]`).
    pub fn value(&self, filter: &[(&str, &str)], key: &str) -> Option<f64> {
        let col = |k: &str| self.columns.iter().position(|c| c.key == k);
        let want: Vec<(usize, &str)> = filter.iter().map(|(k, v)| col(k).map(|i| (i, *v))).collect::<Option<_>>()?;
        let v = col(key)?;
        let row =
            self.rows.iter().find(|r| want.iter().all(|(i, text)| r.get(*i).is_some_and(|c| c.render() == *text)))?;
        match row.get(v)? {
            Cell::Num(x, _) => Some(*x),
            Cell::Int(n) => Some(*n as f64),
            _ => None,
        }
    }

    pub fn json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let m: Map<String, Value> =
                    self.columns.iter().zip(r).map(|(c, v)| (c.key.to_string(), v.json())).collect();
                Value::Object(m)
            })
            .collect();
        json!({ "title": self.title, "rows": rows })
    }
}

/// The results of one scenario: tables plus notes (what was skipped, what
/// limits the numbers).
#[derive(Clone, Debug, Default)]
pub struct Section {
    pub name: String,
    pub tables: Vec<Table>,
    pub notes: Vec<String>,
    /// Failed Mooncake operations in this scenario (a non-zero total fails the run).
    pub failed_ops: u64,
}

impl Section {
    pub fn new(name: impl Into<String>) -> Self {
        Section { name: name.into(), ..Default::default() }
    }

    pub fn note(&mut self, n: impl Into<String>) {
        self.notes.push(n.into());
    }

    pub fn render(&self) -> String {
        let mut out = format!("== {} ==\n", self.name);
        for t in &self.tables {
            out.push_str(&t.render());
            out.push('\n');
        }
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        out
    }

    pub fn json(&self) -> Value {
        json!({
            "tables": self.tables.iter().map(Table::json).collect::<Vec<_>>(),
            "notes": self.notes,
            "failed_ops": self.failed_ops,
        })
    }
}

/// Progress on stderr. On a terminal the current step is redrawn in place;
/// otherwise every step is a line of its own.
pub struct Progress {
    tty: bool,
    start: Instant,
    open_line: bool,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    pub fn new() -> Self {
        Progress { tty: std::io::stderr().is_terminal(), start: Instant::now(), open_line: false }
    }

    /// A step that is starting (replaced by the next one on a terminal).
    pub fn step(&mut self, what: &str) {
        let t = self.start.elapsed().as_secs_f64();
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K[{t:6.1}s] {what}");
            self.open_line = true;
        } else {
            let _ = writeln!(err, "[{t:6.1}s] {what}");
        }
        let _ = err.flush();
    }

    /// A message that stays (skips, warnings, a phase's result).
    pub fn say(&mut self, what: &str) {
        let t = self.start.elapsed().as_secs_f64();
        let mut err = std::io::stderr().lock();
        if self.open_line {
            let _ = write!(err, "\r\x1b[2K");
            self.open_line = false;
        }
        let _ = writeln!(err, "[{t:6.1}s] {what}");
    }

    /// Ends a redrawn line, if any.
    pub fn finish(&mut self) {
        if self.open_line {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err);
            self.open_line = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_and_json_show_the_same_cells() {
        let mut t = Table::new("t", cols(&[("op", "op"), ("ops", "ops"), ("gb_per_s", "GB/s"), ("ratio", "ratio")]));
        t.row(vec![Cell::text("get"), Cell::Int(12), Cell::Num(4.256, 2), Cell::Missing]);
        let text = t.render();
        assert!(text.contains("get   12  4.26      -"), "{text}");
        let j = t.json();
        assert_eq!(j["rows"][0]["ops"], 12);
        assert_eq!(j["rows"][0]["gb_per_s"], 4.256);
        assert!(j["rows"][0]["ratio"].is_null());
        assert_eq!(j["rows"][0]["op"], "get");
        assert_eq!(t.value(&[("op", "get")], "gb_per_s"), Some(4.256));
        assert_eq!(t.value(&[("op", "put")], "gb_per_s"), None);
        assert_eq!(t.value(&[("op", "get")], "ratio"), None);
    }
}
