//! The shape of the code base: no source file outside `tests/` over 700 lines, and no import
//! cycle between modules of a crate.
//!
//! The cycle check reads the sources: each file is a module; a module references another when it
//! names it (or an item in it) in a `use` declaration or in an inline path (`crate::…`,
//! `super::…`, `self::…`, a child module's name, or a name a `use` brought in). A `pub use`
//! re-export is followed to where it points. `mod x;` declarations are not references. Two
//! files that reference each other, directly or through others, form a cycle.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fs,
    path::{Path, PathBuf},
};

const MAX_LINES: usize = 700;

/// The crates of the workspace: (name, root folder, root file).
const CRATES: &[(&str, &str, &str)] = &[
    ("payroll", "src", "lib.rs"),
    ("payroll-actors", "actors/src", "lib.rs"),
    ("payroll-entities", "entities/src", "lib.rs"),
    ("payroll-migration", "migration/src", "lib.rs"),
];

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_file_is_over_700_lines() {
    let root = workspace();
    let mut files = Vec::new();
    for (_, dir, _) in CRATES {
        rust_files(&root.join(dir), &mut files);
    }
    rust_files(&root.join("benches"), &mut files);
    assert!(files.len() > 50, "the scan found the sources");
    let long: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let lines = fs::read_to_string(path).ok()?.lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", path.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:?}");
}

#[test]
fn no_module_import_cycles() {
    let root = workspace();
    let mut report = Vec::new();
    for (name, dir, lib) in CRATES {
        let graph = ModuleGraph::read(&root.join(dir), lib);
        assert!(
            graph.edges.values().map(BTreeSet::len).sum::<usize>() > 0
                || *name == "payroll-migration"
        );
        for cycle in graph.cycles() {
            let edges: Vec<String> = cycle
                .iter()
                .flat_map(|from| {
                    graph
                        .edges
                        .get(from)
                        .into_iter()
                        .flatten()
                        .filter(|to| cycle.contains(to))
                        .map(move |to| format!("  {from} -> {to}"))
                })
                .collect();
            report.push(format!(
                "{name}: {}\n{}",
                cycle.join(" <-> "),
                edges.join("\n")
            ));
        }
    }
    assert!(
        report.is_empty(),
        "module import cycles:\n{}",
        report.join("\n")
    );
}

/// The checker itself finds the cycles it is meant to find.
#[test]
fn the_cycle_check_finds_cycles() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    };
    write(
        "lib.rs",
        "pub mod a;\npub mod b;\npub mod c;\npub mod d;\npub use d::Thing;\n",
    );
    // a <-> b through a use tree and an inline path.
    write("a.rs", "use crate::{b::{self, B}, c};\npub struct A;\n");
    write("b.rs", "pub struct B;\nfn f() { let _ = crate::a::A; }\n");
    // c names `crate::Thing`, which is a re-export of d; d uses c through super.
    write(
        "c.rs",
        "pub fn g() -> crate::Thing { todo!() }\n#[cfg(test)]\nmod tests { use super::*; }\n",
    );
    write("d/mod.rs", "pub mod inner;\npub use inner::Thing;\n");
    write(
        "d/inner.rs",
        "pub struct Thing;\nfn h() { super::super::c::g(); }\n/* crate::a::A in a comment */\nconst S: &str = \"crate::b::B\";\n",
    );
    let graph = ModuleGraph::read(dir.path(), "lib.rs");
    let cycles = graph.cycles();
    assert_eq!(cycles.len(), 2, "{cycles:?}");
    assert!(
        cycles.contains(&vec!["a.rs".to_owned(), "b.rs".to_owned()]),
        "{cycles:?}"
    );
    assert!(
        cycles.contains(&vec!["c.rs".to_owned(), "d/inner.rs".to_owned()]),
        "{cycles:?}"
    );
}

/// Files and the references between them.
struct ModuleGraph {
    /// Module path (`crate::a::b`, inline modules included) → the file that holds it.
    modules: BTreeMap<String, String>,
    /// Per module: names re-exported by `pub use`, with the absolute path they point to.
    reexports: HashMap<String, HashMap<String, String>>,
    /// Per module: the targets of glob re-exports.
    glob_reexports: HashMap<String, Vec<String>>,
    /// File → files it references.
    edges: BTreeMap<String, BTreeSet<String>>,
    texts: HashMap<String, String>,
}

/// A reference found in a file: the module it is made from, and the path as written.
struct Reference {
    module: String,
    path: Vec<String>,
}

impl ModuleGraph {
    fn read(dir: &Path, lib: &str) -> ModuleGraph {
        let mut files = Vec::new();
        rust_files(dir, &mut files);
        let mut graph = ModuleGraph {
            modules: BTreeMap::new(),
            reexports: HashMap::new(),
            glob_reexports: HashMap::new(),
            edges: BTreeMap::new(),
            texts: HashMap::new(),
        };
        let mut parsed = Vec::new();
        for path in files {
            let rel = path
                .strip_prefix(dir)
                .expect("inside the crate")
                .to_string_lossy()
                .replace('\\', "/");
            if rel == "main.rs" && lib != "main.rs" || rel.starts_with("bin/") {
                continue; // another crate of the package
            }
            let module = file_module(&rel, lib);
            let text = strip(&fs::read_to_string(&path).expect("readable source"));
            let tokens = tokenize(&text);
            let inline = inline_modules(&tokens, &module);
            graph.modules.insert(module.clone(), rel.clone());
            for (_, _, name) in &inline {
                graph.modules.insert(name.clone(), rel.clone());
            }
            graph.texts.insert(module.clone(), text);
            parsed.push((rel, module, tokens, inline));
        }
        // Aliases brought in by `use`, per module, and the references.
        let mut aliases: HashMap<String, HashMap<String, String>> = HashMap::new();
        let mut references: Vec<(String, Reference)> = Vec::new();
        for (rel, module, tokens, inline) in &parsed {
            let module_at = |index: usize| {
                inline
                    .iter()
                    .filter(|(start, end, _)| *start <= index && index < *end)
                    .max_by_key(|(start, _, _)| *start)
                    .map_or_else(|| module.clone(), |(_, _, name)| name.clone())
            };
            let mut i = 0;
            while i < tokens.len() {
                let at = module_at(i);
                if tokens[i] == "use" && (i == 0 || tokens[i - 1] != "::") {
                    let public = is_public(tokens, i);
                    let end = tokens[i..]
                        .iter()
                        .position(|t| t == ";")
                        .map_or(tokens.len(), |p| i + p);
                    for (path, alias) in use_leaves(&tokens[i + 1..end]) {
                        let Some(absolute) = graph.absolute(&at, &path, aliases.get(&at)) else {
                            continue;
                        };
                        if public {
                            if alias == "*" {
                                graph
                                    .glob_reexports
                                    .entry(at.clone())
                                    .or_default()
                                    .push(absolute.clone());
                            } else {
                                graph
                                    .reexports
                                    .entry(at.clone())
                                    .or_default()
                                    .insert(alias.clone(), absolute.clone());
                            }
                        }
                        if alias != "*" {
                            aliases
                                .entry(at.clone())
                                .or_default()
                                .insert(alias, absolute.clone());
                        }
                        references.push((
                            rel.clone(),
                            Reference {
                                module: at.clone(),
                                path: split(&absolute),
                            },
                        ));
                    }
                    i = end + 1;
                    continue;
                }
                if is_ident(&tokens[i])
                    && (i == 0 || tokens[i - 1] != "::")
                    && tokens.get(i + 1).is_some_and(|t| t == "::")
                {
                    let mut path = vec![tokens[i].clone()];
                    let mut j = i + 1;
                    while j + 1 < tokens.len() && tokens[j] == "::" && is_ident(&tokens[j + 1]) {
                        path.push(tokens[j + 1].clone());
                        j += 2;
                    }
                    references.push((rel.clone(), Reference { module: at, path }));
                    i = j;
                    continue;
                }
                i += 1;
            }
        }
        for (rel, reference) in references {
            let Some(absolute) = graph.absolute(
                &reference.module,
                &reference.path,
                aliases.get(&reference.module),
            ) else {
                continue;
            };
            if let Some(target) = graph.file_of(&absolute, 0)
                && target != rel
            {
                graph.edges.entry(rel.clone()).or_default().insert(target);
            }
        }
        graph
    }

    /// The absolute module path a path written in `module` names, if it is of this crate.
    fn absolute(
        &self,
        module: &str,
        path: &[String],
        aliases: Option<&HashMap<String, String>>,
    ) -> Option<String> {
        let first = path.first()?;
        let mut base: Vec<String> = split(module);
        let rest: &[String];
        match first.as_str() {
            "crate" => {
                base = vec!["crate".to_owned()];
                rest = &path[1..];
            }
            "self" => rest = &path[1..],
            "super" => {
                let supers = path.iter().take_while(|s| *s == "super").count();
                for _ in 0..supers {
                    base.pop()?;
                }
                rest = &path[supers..];
            }
            _ => {
                let child = format!("{module}::{first}");
                if self.modules.contains_key(&child) {
                    rest = path;
                } else if let Some(target) = aliases.and_then(|a| a.get(first)) {
                    base = split(target);
                    rest = &path[1..];
                } else {
                    return None; // another crate, the prelude or a local name
                }
            }
        }
        base.extend(rest.iter().filter(|s| *s != "self").cloned());
        Some(base.join("::"))
    }

    /// The file an absolute path lands in, following re-exports.
    fn file_of(&self, absolute: &str, depth: usize) -> Option<String> {
        let segments = split(absolute);
        let (module, item) = (1..=segments.len())
            .rev()
            .map(|n| (segments[..n].join("::"), segments.get(n)))
            .find(|(m, _)| self.modules.contains_key(m))?;
        if depth < 8
            && let Some(item) = item
        {
            if let Some(target) = self
                .reexports
                .get(&module)
                .and_then(|r| r.get(item.as_str()))
            {
                return self.file_of(
                    &format!("{target}{}", rest_after(&segments, &module)),
                    depth + 1,
                );
            }
            for glob in self.glob_reexports.get(&module).into_iter().flatten() {
                let candidate = format!("{glob}::{item}");
                if self.modules.contains_key(&candidate) || self.defines(glob, item) {
                    return self.file_of(
                        &format!("{glob}{}", rest_after(&segments, &module)),
                        depth + 1,
                    );
                }
            }
        }
        self.modules.get(&module).cloned()
    }

    /// Whether the module's file defines `name` (or re-exports it).
    fn defines(&self, module: &str, name: &str) -> bool {
        if self
            .reexports
            .get(module)
            .is_some_and(|r| r.contains_key(name))
        {
            return true;
        }
        let Some(text) = self.texts.get(module) else {
            return false;
        };
        let tokens = tokenize(text);
        tokens.windows(2).any(|w| {
            matches!(
                w[0].as_str(),
                "struct" | "enum" | "fn" | "const" | "static" | "type" | "trait" | "mod" | "union"
            ) && w[1] == name
        }) || text.contains(name) && text.contains("macro_rules!") // macro-made items: the defining file names them
    }

    /// Groups of files that reference each other, each sorted, in a stable order.
    fn cycles(&self) -> Vec<Vec<String>> {
        let nodes: Vec<&String> = self
            .modules
            .values()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let index: HashMap<&String, usize> =
            nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let adjacency: Vec<Vec<usize>> = nodes
            .iter()
            .map(|n| {
                self.edges
                    .get(*n)
                    .into_iter()
                    .flatten()
                    .filter_map(|t| index.get(t).copied())
                    .collect()
            })
            .collect();
        let mut groups: Vec<Vec<String>> = strongly_connected(&adjacency)
            .into_iter()
            .filter(|g| g.len() > 1)
            .map(|g| {
                let mut names: Vec<String> = g.into_iter().map(|i| nodes[i].clone()).collect();
                names.sort();
                names
            })
            .collect();
        groups.sort();
        groups
    }
}

fn rest_after(segments: &[String], module: &str) -> String {
    let skip = split(module).len() + 1;
    segments
        .iter()
        .skip(skip)
        .map(|s| format!("::{s}"))
        .collect()
}

fn split(path: &str) -> Vec<String> {
    path.split("::").map(str::to_owned).collect()
}

/// `a/b.rs` → `crate::a::b`; `a/mod.rs` → `crate::a`; the root file → `crate`.
fn file_module(rel: &str, lib: &str) -> String {
    if rel == lib {
        return "crate".to_owned();
    }
    let trimmed = rel.strip_suffix(".rs").unwrap_or(rel);
    let trimmed = trimmed.strip_suffix("/mod").unwrap_or(trimmed);
    format!("crate::{}", trimmed.replace('/', "::"))
}

fn is_ident(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Whether the `use` at `i` is `pub` or `pub(…)`.
fn is_public(tokens: &[String], i: usize) -> bool {
    match i.checked_sub(1).map(|j| tokens[j].as_str()) {
        Some("pub") => true,
        Some(")") => (0..i)
            .rev()
            .find(|&j| tokens[j] == "(")
            .is_some_and(|j| j > 0 && tokens[j - 1] == "pub"),
        _ => false,
    }
}

/// The leaves of a use tree: (path, the name it binds or `*`).
fn use_leaves(tokens: &[String]) -> Vec<(Vec<String>, String)> {
    fn walk(tokens: &[String], prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
        // Split at top-level commas.
        let mut depth = 0;
        let mut start = 0;
        let mut parts = Vec::new();
        for (i, t) in tokens.iter().enumerate() {
            match t.as_str() {
                "{" => depth += 1,
                "}" => depth -= 1,
                "," if depth == 0 => {
                    parts.push(&tokens[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&tokens[start..]);
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            let mut path = prefix.to_vec();
            let mut i = 0;
            let mut leaf = None;
            while i < part.len() {
                match part[i].as_str() {
                    "::" => {}
                    "{" => {
                        walk(&part[i + 1..part.len() - 1], &path, out);
                        leaf = Some(None);
                        break;
                    }
                    "*" => {
                        leaf = Some(Some("*".to_owned()));
                        break;
                    }
                    "as" => {
                        let alias = part.get(i + 1).cloned().unwrap_or_default();
                        leaf = Some(Some(alias));
                        break;
                    }
                    segment => path.push(segment.to_owned()),
                }
                i += 1;
            }
            match leaf {
                Some(None) => {}
                Some(Some(alias)) => out.push((path, alias)),
                None => {
                    let mut name = path.last().cloned().unwrap_or_default();
                    if name == "self" {
                        path.pop();
                        name = path.last().cloned().unwrap_or_default();
                    }
                    out.push((path, name));
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(tokens, &[], &mut out);
    out
}

/// Inline `mod name { … }` blocks: (first token, end token, module path).
fn inline_modules(tokens: &[String], module: &str) -> Vec<(usize, usize, String)> {
    let mut out: Vec<(usize, usize, String)> = Vec::new();
    for i in 0..tokens.len().saturating_sub(2) {
        if tokens[i] == "mod" && is_ident(&tokens[i + 1]) && tokens[i + 2] == "{" {
            let mut depth = 0;
            let mut end = tokens.len();
            for (j, t) in tokens.iter().enumerate().skip(i + 2) {
                match t.as_str() {
                    "{" => depth += 1,
                    "}" => {
                        depth -= 1;
                        if depth == 0 {
                            end = j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let parent = out
                .iter()
                .filter(|(s, e, _)| *s <= i && i < *e)
                .max_by_key(|(s, _, _)| *s)
                .map_or_else(|| module.to_owned(), |(_, _, name)| name.clone());
            out.push((i, end, format!("{parent}::{}", tokens[i + 1])));
        }
    }
    out
}

/// Identifiers, `::`, and single punctuation characters.
fn tokenize(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
            continue;
        }
        if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".to_owned());
            i += 2;
            continue;
        }
        if !c.is_whitespace() {
            tokens.push(c.to_string());
        }
        i += 1;
    }
    tokens
}

/// The source with comments, string and character literals blanked out.
fn strip(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if (c == 'r' || c == 'b' && next == Some('r'))
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
            && {
                let j = if c == 'b' { i + 2 } else { i + 1 };
                let hashes = chars[j..].iter().take_while(|&&h| h == '#').count();
                chars.get(j + hashes) == Some(&'"')
            }
        {
            let j = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[j..].iter().take_while(|&&h| h == '#').count();
            i = j + hashes + 1;
            loop {
                if i >= chars.len() {
                    break;
                }
                if chars[i] == '"'
                    && chars[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes
                {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && next == Some('\\') {
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Tarjan's strongly connected components.
fn strongly_connected(adjacency: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adjacency: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.adjacency[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                group.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(group);
        }
    }
    let n = adjacency.len();
    let mut state = State {
        adjacency,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if state.index[v].is_none() {
            visit(&mut state, v);
        }
    }
    state.out
}
