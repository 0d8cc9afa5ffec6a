//! The one place the controller writes and reads CSV: rows of a serde row type appended to a
//! file whose header is that type's field names, and read back typed, each row that does not
//! parse named by line, column and value.
//!
//! Both go through [`host::Folder`]: a CSV file that is a link, a device or a pipe is refused,
//! and one larger than [`MAX_CSV_BYTES`] is not read.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;

use host::Folder;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::ResultsError;

/// Largest CSV file read, 256 MiB: `summary.csv` of the planner's largest study (100,000
/// cells, about 1 KiB a row) with retries, or hours of metrics samples.
pub const MAX_CSV_BYTES: u64 = 256 << 20;
/// Longest header line read to check an existing file's columns.
const MAX_HEADER_BYTES: u64 = 64 << 10;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ResultsError + '_ {
    move |source| ResultsError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn format(path: &Path, problem: impl std::fmt::Display) -> ResultsError {
    ResultsError::Format {
        path: path.display().to_string(),
        problem: problem.to_string(),
    }
}

/// `rows` as CSV text, the header line first when `header` is set.
fn encode<R: Serialize>(path: &Path, rows: &[R], header: bool) -> Result<Vec<u8>, ResultsError> {
    let mut writer = csv::WriterBuilder::new()
        .has_headers(header)
        .from_writer(Vec::new());
    for row in rows {
        writer.serialize(row).map_err(|e| format(path, e))?;
    }
    writer.into_inner().map_err(|e| format(path, e.error()))
}

/// The header line this row type writes, newline excluded.
fn header_of<R: Serialize>(path: &Path, row: &R) -> Result<String, ResultsError> {
    let text = encode(path, std::slice::from_ref(row), true)?;
    let text = String::from_utf8_lossy(&text);
    Ok(text.lines().next().unwrap_or_default().to_string())
}

/// Appends `rows` to the CSV file `name` of `folder`, the header first when the file is new or
/// empty, in a single write and synced: a process killed mid-row must not leave half a line
/// for the next row to be glued to. A file whose header is not this row type's (another
/// version's folder) is refused rather than extended with rows that do not line up.
pub fn append<R: Serialize>(folder: &Folder, name: &str, rows: &[R]) -> Result<(), ResultsError> {
    let Some(first) = rows.first() else {
        return Ok(());
    };
    let path = folder.path().join(name);
    let path = path.as_path();
    let existing = match folder.open_file(Path::new(name))? {
        Some((file, _)) => {
            let mut line = String::new();
            BufReader::new(file.take(MAX_HEADER_BYTES))
                .read_line(&mut line)
                .map_err(io(path))?;
            Some(line.trim_end_matches(['\r', '\n']).to_string())
        }
        None => None,
    };
    let new = existing.as_deref().is_none_or(str::is_empty);
    if let Some(found) = existing.filter(|line| !line.is_empty()) {
        let expected = header_of(path, first)?;
        if found != expected {
            return Err(format(
                path,
                format!(
                    "its header is not the one this version writes (expected {expected:?}, \
                     found {found:?}); write to a new results folder"
                ),
            ));
        }
    }
    let text = encode(path, rows, new)?;
    Ok(folder.append(name, &text)?)
}

/// Every row of the CSV file at `path`, each typed or the reason it is not (naming the line,
/// the column and its value); `None` when there is no such file. The header must name every
/// column of `required`; other columns may be missing (older folders) or extra. The file
/// must be a regular file of at most [`MAX_CSV_BYTES`], not a link.
pub fn read<R: DeserializeOwned>(
    path: &Path,
    required: &[&str],
) -> Result<Option<Vec<Result<R, ResultsError>>>, ResultsError> {
    let Some(file) = super::in_place::open_in_place(path, MAX_CSV_BYTES)? else {
        return Ok(None);
    };
    let mut reader = csv::Reader::from_reader(BufReader::new(file));
    let header = reader.headers().map_err(|e| format(path, e))?.clone();
    if let Some(missing) = required.iter().find(|c| !header.iter().any(|h| h == **c)) {
        return Err(format(
            path,
            format!("the header has no column {missing:?}"),
        ));
    }
    let rows = reader
        .records()
        .map(|record| {
            let record = record.map_err(|e| format(path, e))?;
            record
                .deserialize::<R>(Some(&header))
                .map_err(|error| row_error(path, &header, &record, &error))
        })
        .collect();
    Ok(Some(rows))
}

/// What is wrong with one row: its line, and the column and value when the problem is one
/// field's.
fn row_error(
    path: &Path,
    header: &csv::StringRecord,
    record: &csv::StringRecord,
    error: &csv::Error,
) -> ResultsError {
    let line = record.position().map_or(0, csv::Position::line);
    let (field, problem) = match error.kind() {
        csv::ErrorKind::Deserialize { err, .. } => (err.field(), err.kind().to_string()),
        _ => (None, error.to_string()),
    };
    let Some(index) = field.and_then(|f| usize::try_from(f).ok()) else {
        return format(path, format!("line {line}: {problem}"));
    };
    ResultsError::Row {
        path: path.display().to_string(),
        line,
        column: header.get(index).unwrap_or_default().to_string(),
        value: record.get(index).unwrap_or_default().to_string(),
        problem,
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Row {
        name: String,
        count: u32,
        note: Option<String>,
    }

    fn row(name: &str, count: u32) -> Row {
        Row {
            name: name.to_string(),
            count,
            note: None,
        }
    }

    #[test]
    fn rows_append_under_one_header_and_quote_what_needs_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.csv");
        let folder = Folder::open(dir.path()).expect("open");
        append(&folder, "t.csv", &[row("a, \"quoted\"", 1)]).expect("first");
        append(&folder, "t.csv", &[row("b", 2), row("c\nd", 3)]).expect("second");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            "name,count,note\n\"a, \"\"quoted\"\"\",1,\nb,2,\n\"c\nd\",3,\n"
        );
        let rows: Vec<Row> = read(&path, &["name"])
            .expect("read")
            .expect("present")
            .into_iter()
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(rows, [row("a, \"quoted\"", 1), row("b", 2), row("c\nd", 3)]);
        assert!(
            read::<Row>(&dir.path().join("none.csv"), &[])
                .expect("absent")
                .is_none()
        );
    }

    #[test]
    fn a_bad_field_is_named_by_line_column_and_value() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.csv");
        std::fs::write(&path, "name,count\na,1\nb,many\n").expect("write");
        let rows = read::<Row>(&path, &["name", "count"])
            .expect("read")
            .expect("present");
        assert!(rows[0].is_ok());
        let error = rows[1].as_ref().expect_err("bad count").to_string();
        assert!(
            error.contains("t.csv line 3: column count = \"many\""),
            "{error}"
        );
        let error = read::<Row>(&path, &["name", "total"]).expect_err("no column");
        assert!(error.to_string().contains("no column \"total\""), "{error}");
    }

    #[test]
    fn a_file_of_another_header_is_not_extended() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.csv");
        std::fs::write(&path, "name,total\na,1\n").expect("write");
        let folder = Folder::open(dir.path()).expect("open");
        let error = append(&folder, "t.csv", &[row("b", 2)]).expect_err("another header");
        assert!(error.to_string().contains("header"), "{error}");
    }
}
