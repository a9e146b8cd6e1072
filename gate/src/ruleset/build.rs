//! Building a [`RuleSet`]: each rule validated as it comes, then the masks,
//! the path matcher and the two substring automata made once. Compile time
//! only; allocates.

use super::*;

/// Builds a [`RuleSet`] one rule at a time, validating each as it comes, so
/// a profile compiler can report every refused rule with its position.
/// Allocates; compile time only. A regex is compiled here (its NFA is
/// bounded by [`REGEX_NFA_BYTES`]).
#[derive(Debug, Default)]
pub struct RuleSetBuilder {
    specs: Vec<RuleSpec>,
    rules: Vec<Rule>,
    matcher: PathMatcher<usize>,
    regexes: Vec<PathRegex>,
    needles: Vec<(usize, String)>,
    path_needles: Vec<(usize, String)>,
    /// Rules pushed, refused ones included.
    pushed: usize,
}

impl RuleSetBuilder {
    pub fn new() -> RuleSetBuilder {
        RuleSetBuilder::default()
    }

    /// Rules accepted so far.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Validates and adds a rule; returns its index in the set. A refused
    /// rule is not added; an error names the rule by its position among
    /// every rule pushed, refused ones included (its place in the profile).
    pub fn push(&mut self, spec: &RuleSpec) -> Result<usize, RuleSetError> {
        let position = self.pushed;
        self.pushed += 1;
        if self.rules.len() >= MAX_RULES {
            return Err(RuleSetError::TooManyRules);
        }
        let index = self.rules.len();
        self.compile_rule(index, spec)
            .map_err(|error| RuleSetError::Rule {
                index: position,
                error,
            })?;
        Ok(index)
    }

    fn compile_rule(&mut self, index: usize, spec: &RuleSpec) -> Result<(), RuleError> {
        let methods = spec::normalize_methods(&spec.methods)?;
        let contains = spec::normalize_user_agents(&spec.user_agent.contains)?;
        if spec.path.is_none()
            && methods.is_empty()
            && contains.is_empty()
            && !spec.user_agent.empty
        {
            return Err(RuleError::Empty);
        }
        let mut stated = spec.clone();
        let path = match &spec.path {
            None => PathCond::None,
            Some(p) => match p.kind {
                PathPatternKind::Exact | PathPatternKind::Prefix => {
                    let lower = compile_pattern(&p.pattern).map_err(RuleError::Path)?;
                    stated.path.as_mut().expect("path").pattern =
                        String::from_utf8(lower.into_vec()).expect("pattern was a str");
                    PathCond::Indexed
                }
                PathPatternKind::Glob => {
                    let glob = Glob::compile(&p.pattern).map_err(RuleError::Glob)?;
                    stated.path.as_mut().expect("path").pattern = glob.as_str().to_owned();
                    let cond = GlobCond::new(glob);
                    if let Some(l) = &cond.literal {
                        self.path_needles.push((index, l.to_string()));
                    }
                    PathCond::Glob(cond)
                }
                PathPatternKind::Regex => {
                    let re = PathRegex::compile(&p.pattern).map_err(RuleError::Regex)?;
                    self.regexes.push(re);
                    PathCond::Regex(self.regexes.len() - 1)
                }
            },
        };
        // Every check has passed: commit.
        if let Some(p) = &spec.path {
            let kind = match p.kind {
                PathPatternKind::Exact => Some(PathKind::Exact),
                PathPatternKind::Prefix => Some(PathKind::Prefix),
                _ => None,
            };
            if let Some(kind) = kind {
                self.matcher
                    .insert(kind, &p.pattern, index)
                    .map_err(RuleError::Path)?;
            }
        }
        self.needles
            .extend(contains.iter().map(|s| (index, s.clone())));
        self.rules.push(Rule {
            action: spec.action,
            methods: methods.iter().map(|m| Method::new(m)).collect(),
            ua_contains: !contains.is_empty(),
            ua_empty: spec.user_agent.empty,
            path,
        });
        stated.methods = methods;
        stated.user_agent.contains = contains;
        self.specs.push(stated);
        Ok(())
    }

    /// The compiled set. Builds the user-agent automaton: O(total substring
    /// bytes).
    pub fn build(self) -> RuleSet {
        let mut scan = RuleBits::default();
        let mut other_methods = RuleBits::default();
        let mut ua_only = RuleBits::default();
        let mut glob_literals = RuleBits::default();
        let mut method_masks: Vec<(Method, RuleBits)> = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            if !matches!(r.path, PathCond::Indexed) {
                scan.set(i);
            }
            if r.methods.is_empty() {
                other_methods.set(i);
            }
            if r.ua_contains && !r.ua_empty {
                ua_only.set(i);
            }
            if matches!(&r.path, PathCond::Glob(g) if g.literal.is_some()) {
                glob_literals.set(i);
            }
            for m in r.methods.iter() {
                if !method_masks.iter().any(|(k, _)| k.bytes == m.bytes) {
                    method_masks.push((*m, RuleBits::default()));
                }
            }
        }
        for (m, bits) in method_masks.iter_mut() {
            for (i, r) in self.rules.iter().enumerate() {
                if r.methods.is_empty() || r.methods.iter().any(|k| k.bytes == m.bytes) {
                    bits.set(i);
                }
            }
        }
        // Per byte, the rules a path ending with it may match; equal masks
        // share a class.
        let mut last_class = Box::new([0u8; 256]);
        let mut last_masks: Vec<RuleBits> = Vec::new();
        for b in 0..=255u8 {
            let mut bits = RuleBits::default();
            for (i, r) in self.rules.iter().enumerate() {
                let fits = match &r.path {
                    PathCond::Glob(g) => {
                        g.suffix.last().is_none_or(|&e| e.eq_ignore_ascii_case(&b))
                    }
                    PathCond::Regex(slot) => self.regexes[*slot].may_end_with(b),
                    _ => true,
                };
                if fits {
                    bits.set(i);
                }
            }
            let class = match last_masks.iter().position(|m| *m == bits) {
                Some(c) => c,
                None => {
                    last_masks.push(bits);
                    last_masks.len() - 1
                }
            };
            // At most 256 classes, one per byte.
            last_class[usize::from(b)] = class as u8;
        }
        let last_masks = last_masks.into_boxed_slice();
        RuleSet {
            id: NEXT_SET_ID.fetch_add(1, Ordering::Relaxed),
            needs_path: self.rules.iter().any(|r| !matches!(r.path, PathCond::None)),
            specs: self.specs.into_boxed_slice(),
            rules: self.rules.into_boxed_slice(),
            matcher: self.matcher,
            scan,
            method_masks: method_masks.into_boxed_slice(),
            other_methods,
            last_class,
            last_masks,
            ua_only,
            glob_literals,
            ua: Needles::build(&self.needles),
            path_needles: Needles::build(&self.path_needles),
            regexes: self.regexes.into_boxed_slice(),
        }
    }
}
