//! The README and the guide (docs/*.md) held to the code: every Rust block in them is marked
//! `<!-- checked: file PATH -->` (the block is that file, but for its leading `//!` lines) or
//! `<!-- checked: excerpt of PATH -->` (the block's lines, each trimmed, are consecutive lines of
//! that file), and those files compile and run in the workspace's tests; every link between
//! them leads to a file that exists and, with `#anchor`, to a heading of it.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn workspace_file(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// README.md and every page of docs/, as workspace paths.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_owned()];
    let docs = std::fs::read_dir(root().join("docs")).expect("docs/");
    let mut guide: Vec<String> = docs
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    guide.sort();
    pages.extend(guide);
    pages
}

/// A Rust block of a page: its marker (the line before its fence), its first line's number and
/// its text.
struct RustBlock {
    marker: String,
    line: usize,
    text: String,
}

fn rust_blocks(page: &str) -> Vec<RustBlock> {
    let lines: Vec<&str> = page.lines().collect();
    let mut blocks = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let fence = lines[at].trim_start();
        if !fence.starts_with("```") {
            at += 1;
            continue;
        }
        let rust = fence == "```rust";
        let marker = if at > 0 { lines[at - 1].trim() } else { "" };
        let mut text = String::new();
        let start = at + 1;
        at += 1;
        while at < lines.len() && lines[at].trim() != "```" {
            text.push_str(lines[at]);
            text.push('\n');
            at += 1;
        }
        at += 1;
        if rust {
            blocks.push(RustBlock {
                marker: marker.to_owned(),
                line: start,
                text,
            });
        }
    }
    blocks
}

/// Checks one block against its marker; the error says which and why.
fn check_block(page: &str, block: &RustBlock) -> Result<(), String> {
    let here = format!("{page}:{}", block.line);
    let marker = block
        .marker
        .strip_prefix("<!-- checked: ")
        .and_then(|rest| rest.strip_suffix(" -->"))
        .ok_or_else(|| {
            format!("{here}: a Rust block without `<!-- checked: file|excerpt of PATH -->`")
        })?;
    let (kind, path) = marker
        .rsplit_once(' ')
        .ok_or_else(|| format!("{here}: `{marker}`: `file PATH` or `excerpt of PATH`"))?;
    let file = std::fs::read_to_string(root().join(path))
        .map_err(|err| format!("{here}: {path}: {err}"))?;
    match kind {
        "file" => {
            let body: Vec<&str> = file
                .lines()
                .skip_while(|line| line.starts_with("//!"))
                .skip_while(|line| line.is_empty())
                .collect();
            let body = body.join("\n") + "\n";
            if block.text != body {
                return Err(format!("{here}: the copy of {path} differs from the file"));
            }
        }
        "excerpt of" => {
            let wanted: Vec<&str> = block.text.lines().map(str::trim).collect();
            let have: Vec<&str> = file.lines().map(str::trim).collect();
            if wanted.is_empty() || !have.windows(wanted.len()).any(|lines| lines == wanted) {
                return Err(format!(
                    "{here}: this excerpt is not in {path}:\n{}",
                    block.text
                ));
            }
        }
        other => return Err(format!("{here}: unknown marker `{other}` for {path}")),
    }
    Ok(())
}

#[test]
fn every_rust_block_of_the_readme_and_the_guide_is_code_that_compiles() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for block in rust_blocks(&workspace_file(&page)) {
            match check_block(&page, &block) {
                Ok(()) => checked += 1,
                Err(why) => wrong.push(why),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    assert!(checked > 20, "only {checked} Rust blocks found");
}

#[test]
fn a_block_that_drifted_from_its_file_is_caught() {
    let page = "<!-- checked: excerpt of examples/src/bin/getting_started.rs -->\n\
                ```rust\nasync fn place_order(user_id: u64) -> Result<String, LockError> {\n```\n";
    let blocks = rust_blocks(page);
    assert_eq!(blocks.len(), 1);
    assert!(check_block("test", &blocks[0]).is_err());
    let unmarked = rust_blocks("text\n```rust\nfn main() {}\n```\n");
    assert!(check_block("test", &unmarked[0]).is_err());
}

#[test]
fn the_readme_shows_the_getting_started_program_and_the_api_page_the_one_without_attribute() {
    let shows = |page: &str, path: &str| {
        rust_blocks(&workspace_file(page))
            .iter()
            .any(|block| block.marker == format!("<!-- checked: file {path} -->"))
    };
    assert!(shows("README.md", "examples/src/bin/getting_started.rs"));
    assert!(shows(
        "docs/API.md",
        "examples/src/bin/without_attribute.rs"
    ));
}

/// The dependencies the README tells a newcomer to add: every crate the getting-started program
/// names.
#[test]
fn the_readme_s_dependencies_are_the_ones_getting_started_uses() {
    let readme = workspace_file("README.md");
    let toml = readme
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a toml block in the README");
    let program = workspace_file("examples/src/bin/getting_started.rs");
    for (krate, path) in [
        ("lock-runtime", "lock_runtime::"),
        ("tokio", "tokio::"),
        ("tracing-subscriber", "tracing_subscriber::"),
    ] {
        assert!(program.contains(path), "getting_started.rs uses {path}");
        assert!(
            toml.lines()
                .any(|line| line.starts_with(&format!("{krate} "))),
            "the README's dependencies name {krate}:\n{toml}"
        );
    }
}

#[test]
fn the_readme_is_a_front_door_with_the_two_commands() {
    let readme = workspace_file("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 400,
        "the README has {lines} lines; depth goes to docs/"
    );
    for command in [
        "cargo run -p lock-examples --bin flash_sale",
        "bash scripts/test.sh",
        "tracing_subscriber::",
    ] {
        assert!(readme.contains(command), "the README says `{command}`");
    }
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, other punctuation but `-` and `_`
/// dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

fn anchors(page: &str) -> Vec<String> {
    let mut in_code = false;
    let mut found = Vec::new();
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

/// The relative links of a page: `](target)`, without those to the web or within a code span.
fn links(page: &str) -> Vec<String> {
    let mut found = Vec::new();
    for piece in page.split("](").skip(1) {
        let Some(target) = piece.split(')').next() else {
            continue;
        };
        if !target.contains("://") && !target.starts_with("mailto:") && !target.contains(' ') {
            found.push(target.to_owned());
        }
    }
    found
}

#[test]
fn every_link_of_the_readme_and_the_guide_leads_somewhere() {
    let mut wrong = Vec::new();
    for page in pages() {
        let text = workspace_file(&page);
        let dir = Path::new(&page).parent().unwrap_or(Path::new(""));
        for link in links(&text) {
            let (file, fragment) = match link.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                PathBuf::from(&page)
            } else {
                dir.join(file)
            };
            let Ok(contents) = std::fs::read_to_string(root().join(&target)) else {
                if !root().join(&target).is_dir() {
                    wrong.push(format!("{page}: `{link}`: no {}", target.display()));
                }
                continue;
            };
            if let Some(fragment) = fragment
                && !anchors(&contents).iter().any(|have| have == fragment)
            {
                wrong.push(format!("{page}: `{link}`: no heading #{fragment}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_guide_s_contents_link_every_page() {
    let contents = workspace_file("docs/README.md");
    for page in pages() {
        let Some(name) = page.strip_prefix("docs/") else {
            continue;
        };
        if name != "README.md" {
            assert!(
                contents.contains(&format!("]({name}")),
                "docs/README.md links {name}"
            );
        }
    }
}
