//! A Kafka Connect-style source task whose offsets are its own: it reads
//! files line by line, and its source offset for each file is a struct
//! (the line number and the byte position to resume at), kept in
//! `inflight::store::FileStore`. A pool of producer threads delivers the
//! records out of order; the task commits every 2,000 records with
//! `Tracker::flush_to` (wait → save → commit).
//!
//! It runs the task twice on the same files: the first run stops cleanly
//! half-way, the second resumes from the stored offsets. The sink then
//! holds every line exactly once.
//!
//! ```sh
//! cargo run --release --features serde --example source_task
//! ```

use inflight::store::{FileStore, OffsetStore};
use inflight::{Ticket, Tracker};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// Where to resume reading a file: Connect's "source offset".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Position {
    /// Lines read (the next line's number).
    line: u64,
    /// The byte the next line starts at.
    byte: u64,
}

const FILES: usize = 3;
const LINES: u64 = 20_000;
const COMMIT_EVERY: u64 = 2_000;
const PRODUCERS: usize = 4;

type Sink = Arc<Mutex<Vec<String>>>;

fn main() -> Result<(), Box<dyn Error>> {
    let dir = std::env::temp_dir().join(format!("inflight-source-task-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let files = write_files(&dir)?;
    let store = dir.join("offsets.json");
    let sink: Sink = Arc::default();

    let first = run(&files, &store, &sink, Some(LINES * FILES as u64 / 2))?;
    println!("first run:  {first} lines, stopped cleanly half-way");
    let stored = FileStore::<String, Position>::open(&store)?.load()?;
    for (file, position) in BTreeMap::from_iter(stored) {
        println!("  stored {file}: {position:?}");
    }
    let second = run(&files, &store, &sink, None)?;
    println!("second run: {second} lines, resumed from the stored offsets");

    // Every line of every file exactly once.
    let mut seen: HashMap<String, u32> = HashMap::new();
    for line in sink.lock().unwrap().iter() {
        *seen.entry(line.clone()).or_default() += 1;
    }
    let duplicates = seen.values().filter(|&&n| n > 1).count();
    let missing = FILES as u64 * LINES - seen.len() as u64;
    println!(
        "sink: {} lines, {duplicates} duplicates, {missing} missing",
        seen.len()
    );
    fs::remove_dir_all(&dir)?;
    assert_eq!((duplicates, missing), (0, 0));
    Ok(())
}

/// The source files: `LINES` lines each.
fn write_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    (0..FILES)
        .map(|f| {
            let path = dir.join(format!("table-{f}.csv"));
            let mut file = std::io::BufWriter::new(File::create(&path)?);
            for line in 0..LINES {
                writeln!(
                    file,
                    "table-{f},{line},{}",
                    "x".repeat((line % 17) as usize)
                )?;
            }
            file.flush()?;
            Ok(path)
        })
        .collect()
}

/// One run of the task: resumes each file at its stored position, sends
/// its lines round-robin across the files, commits every `COMMIT_EVERY`,
/// and stops cleanly after `stop_after` lines (or at the end). Returns the
/// lines it sent.
fn run(
    files: &[PathBuf],
    store: &Path,
    sink: &Sink,
    stop_after: Option<u64>,
) -> Result<u64, Box<dyn Error>> {
    let mut store: FileStore<String, Position> = FileStore::open(store)?;
    let resume = store.load()?;
    let tracker = Arc::new(Tracker::<String, Position>::new());

    // The producer: threads that deliver records out of order, then ack.
    let (to_producer, from_task) = mpsc::channel::<(Ticket, String)>();
    let from_task = Arc::new(Mutex::new(from_task));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let (tracker, sink, from_task) = (tracker.clone(), sink.clone(), from_task.clone());
            thread::spawn(move || loop {
                let Ok((ticket, line)) = from_task.lock().unwrap().recv() else {
                    return;
                };
                sink.lock().unwrap().push(line);
                tracker.ack(ticket).unwrap();
            })
        })
        .collect();

    // The source: one reader per file, at its stored position.
    let mut readers = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let at = resume
            .get(&name)
            .cloned()
            .unwrap_or(Position { line: 0, byte: 0 });
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(at.byte))?;
        readers.push((name, BufReader::new(file), at));
    }
    let mut sent = 0;
    let mut line = String::new();
    'source: loop {
        let mut any = false;
        for (name, reader, at) in &mut readers {
            line.clear();
            let n = reader.read_line(&mut line)? as u64;
            if n == 0 {
                continue;
            }
            any = true;
            // The record's source offset: where to resume after it.
            at.line += 1;
            at.byte += n;
            let ticket = tracker.send(name.clone(), at.clone())?;
            to_producer.send((ticket, line.trim_end().to_string()))?;
            sent += 1;
            if sent % COMMIT_EVERY == 0 {
                tracker.flush_to(&mut store, Duration::from_secs(30))?;
            }
            if stop_after == Some(sent) {
                break 'source;
            }
        }
        if !any {
            break;
        }
    }
    // A clean stop: nothing new, a last commit that covers everything sent.
    tracker.close();
    tracker.flush_to(&mut store, Duration::from_secs(30))?;
    drop(to_producer);
    for producer in producers {
        producer.join().unwrap();
    }
    Ok(sent)
}
