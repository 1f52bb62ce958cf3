//! ClassAd expressions: the syntax tree and its parser, on the lexical rules
//! of the ad parser (strings, numbers, names; see the module above).
//!
//! Grammar, lowest precedence first (as HTCondor's `classad::ClassAdParser`):
//! `c ? a : b`, `||`, `&&`, `|`, `^`, `&`, `== != =?= =!= is isnt`,
//! `< <= > >=`, `+ -`, `* / %`, unary `- + !`, then `.name` selection and
//! `[i]` subscripts on primaries: literals, attribute references (`Name`,
//! `MY.Name`, `TARGET.Name`, `other.Name`), the bare scopes `MY`, `TARGET`
//! and `other` (a whole ad, for functions such as `boinc_data_overlap`),
//! calls `f(a, b)`, lists `{a, b}`, records `[a = 1; b = 2]` and `( e )`.
//! Not supported: shifts, comments, absolute references (`.Name`).
//!
//! [`Expr`]'s `Display` writes text that parses back to the same tree
//! (operations fully parenthesised), which the property tests and the fuzz
//! target check.

use std::fmt;

use super::{integer, is_identifier, real, write_name, write_quoted, ClassAdError, Parser};

/// Deepest expression tree accepted (the height, however reached: nesting
/// or a long chain like `1+1+...`). Evaluation recurses over the tree, so
/// this bounds its stack.
pub const MAX_EXPR_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Int(i64),
    /// Always finite when parsed.
    Real(f64),
    Str(String),
    Bool(bool),
    Undefined,
    Error,
    /// `Name`, `MY.Name` or `TARGET.Name` (`other.Name` is `TARGET.Name`).
    Attr {
        scope: Scope,
        name: String,
    },
    /// `MY`, `TARGET` or `other` alone: the whole ad.
    Ad(Scope),
    /// `e.name` on anything but a scope keyword.
    Select(Box<Expr>, String),
    /// `e[i]`
    Index(Box<Expr>, Box<Expr>),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `c ? a : b`
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    /// A function call; the name as written (looked up ignoring case).
    Call(String, Vec<Expr>),
    List(Vec<Expr>),
    Record(Vec<(String, Expr)>),
}

/// Where an attribute reference looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Unqualified: this ad, then the other one.
    Any,
    My,
    Target,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Or,
    And,
    BitOr,
    BitXor,
    BitAnd,
    Eq,
    Ne,
    /// `=?=` / `is`
    Is,
    /// `=!=` / `isnt`
    Isnt,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

impl BinOp {
    fn text(self) -> &'static str {
        match self {
            BinOp::Or => "||",
            BinOp::And => "&&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::BitAnd => "&",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Is => "=?=",
            BinOp::Isnt => "=!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
        }
    }
}

impl Expr {
    /// Parses one whole expression (surrounding whitespace allowed).
    pub fn parse(text: &str) -> Result<Expr, ClassAdError> {
        if let Some(at) = text.bytes().position(|b| b == 0) {
            return Err(ClassAdError::Syntax { pos: at, what: "NUL byte" });
        }
        let mut p = ExprParser { lex: Parser { text, s: text.as_bytes(), pos: 0 } };
        let (e, _) = p.expr(0)?;
        p.ws();
        if p.lex.pos < text.len() {
            return Err(p.err("text after the expression"));
        }
        Ok(e)
    }

    /// Every function name called anywhere in the tree.
    pub fn calls<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Expr::Call(name, args) => {
                out.push(name);
                args.iter().for_each(|a| a.calls(out));
            }
            Expr::Select(e, _) | Expr::Unary(_, e) => e.calls(out),
            Expr::Index(a, b) | Expr::Binary(_, a, b) => {
                a.calls(out);
                b.calls(out);
            }
            Expr::Cond(a, b, c) => {
                a.calls(out);
                b.calls(out);
                c.calls(out);
            }
            Expr::List(items) => items.iter().for_each(|a| a.calls(out)),
            Expr::Record(attrs) => attrs.iter().for_each(|(_, a)| a.calls(out)),
            _ => {}
        }
    }
}

fn is_scope_word(name: &str) -> Option<Scope> {
    if name.eq_ignore_ascii_case("my") {
        Some(Scope::My)
    } else if name.eq_ignore_ascii_case("target") || name.eq_ignore_ascii_case("other") {
        Some(Scope::Target)
    } else {
        None
    }
}

/// A name as the parser reads it back to the same attribute: quoted when
/// it is not an identifier or would read as a scope keyword.
fn write_attr_name(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    if is_scope_word(name).is_some() {
        write_quoted(f, name, '\'')
    } else {
        write_name(f, name)
    }
}

/// A number before `.` or `[` is parenthesised: `1.x` would read as a
/// (bad) number.
fn write_postfix_base(f: &mut fmt::Formatter<'_>, e: &Expr) -> fmt::Result {
    match e {
        Expr::Int(_) | Expr::Real(_) => write!(f, "({e})"),
        _ => write!(f, "{e}"),
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Int(i) => write!(f, "{i}"),
            Expr::Real(r) => write!(f, "{}", super::Value::Real(*r)),
            Expr::Str(s) => write_quoted(f, s, '"'),
            Expr::Bool(b) => write!(f, "{b}"),
            Expr::Undefined => f.write_str("undefined"),
            Expr::Error => f.write_str("error"),
            Expr::Attr { scope, name } => {
                match scope {
                    Scope::Any => {}
                    Scope::My => f.write_str("MY.")?,
                    Scope::Target => f.write_str("TARGET.")?,
                }
                write_attr_name(f, name)
            }
            Expr::Ad(Scope::My) => f.write_str("MY"),
            Expr::Ad(_) => f.write_str("TARGET"),
            Expr::Select(e, name) => {
                write_postfix_base(f, e)?;
                f.write_str(".")?;
                write_attr_name(f, name)
            }
            Expr::Index(e, i) => {
                write_postfix_base(f, e)?;
                write!(f, "[{i}]")
            }
            // A negative number literal is a literal; this form keeps a
            // negated literal from reading back as one.
            Expr::Unary(UnOp::Neg, e) => write!(f, "-({e})"),
            Expr::Unary(UnOp::Not, e) => write!(f, "!({e})"),
            Expr::Binary(op, a, b) => write!(f, "({a} {} {b})", op.text()),
            Expr::Cond(c, a, b) => write!(f, "({c} ? {a} : {b})"),
            Expr::Call(name, args) => {
                write!(f, "{name}(")?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
            Expr::List(items) => {
                f.write_str("{")?;
                for (i, a) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str("}")
            }
            Expr::Record(attrs) => {
                f.write_str("[")?;
                for (i, (name, a)) in attrs.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write_name(f, name)?;
                    write!(f, " = {a}")?;
                }
                f.write_str("]")
            }
        }
    }
}

struct ExprParser<'a> {
    lex: Parser<'a>,
}

/// A parsed subtree and its height.
type Node = (Expr, usize);

impl ExprParser<'_> {
    fn err(&self, what: &'static str) -> ClassAdError {
        self.lex.err(what)
    }

    fn ws(&mut self) {
        self.lex.skip_ws();
    }

    fn peek(&self) -> Option<u8> {
        self.lex.peek()
    }

    fn rest(&self) -> &[u8] {
        &self.lex.s[self.lex.pos..]
    }

    /// Consumes `tok` (after whitespace) if it is next.
    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.rest().starts_with(tok.as_bytes()) {
            self.lex.pos += tok.len();
            true
        } else {
            false
        }
    }

    /// Consumes a keyword operator (`is`, `isnt`) not followed by a name byte.
    fn eat_word(&mut self, word: &str) -> bool {
        self.ws();
        let r = self.rest();
        if r.len() >= word.len()
            && r[..word.len()].eq_ignore_ascii_case(word.as_bytes())
            && !r.get(word.len()).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            self.lex.pos += word.len();
            true
        } else {
            false
        }
    }

    fn height(&self, h: usize) -> Result<usize, ClassAdError> {
        if h > MAX_EXPR_DEPTH {
            Err(ClassAdError::TooDeep { pos: self.lex.pos })
        } else {
            Ok(h)
        }
    }

    fn bin(&self, op: BinOp, a: Node, b: Node) -> Result<Node, ClassAdError> {
        let h = self.height(1 + a.1.max(b.1))?;
        Ok((Expr::Binary(op, Box::new(a.0), Box::new(b.0)), h))
    }

    /// `depth` counts the recursion through parentheses and friends, so the
    /// parser's own stack stays bounded before any tree is built.
    fn expr(&mut self, depth: usize) -> Result<Node, ClassAdError> {
        if depth > MAX_EXPR_DEPTH {
            return Err(ClassAdError::TooDeep { pos: self.lex.pos });
        }
        let c = self.binary(0, depth)?;
        if self.eat("?") {
            let a = self.expr(depth + 1)?;
            if !self.eat(":") {
                return Err(self.err("expected ':'"));
            }
            let b = self.expr(depth + 1)?;
            let h = self.height(1 + c.1.max(a.1).max(b.1))?;
            return Ok((Expr::Cond(Box::new(c.0), Box::new(a.0), Box::new(b.0)), h));
        }
        Ok(c)
    }

    /// The operator of precedence `level` next in the input, consumed.
    fn operator(&mut self, level: usize) -> Option<BinOp> {
        let ops: &[(&str, BinOp)] = match level {
            0 => &[("||", BinOp::Or)],
            1 => &[("&&", BinOp::And)],
            2 => &[("|", BinOp::BitOr)],
            3 => &[("^", BinOp::BitXor)],
            4 => &[("&", BinOp::BitAnd)],
            5 => &[("=?=", BinOp::Is), ("=!=", BinOp::Isnt), ("==", BinOp::Eq), ("!=", BinOp::Ne)],
            6 => &[("<=", BinOp::Le), (">=", BinOp::Ge), ("<", BinOp::Lt), (">", BinOp::Gt)],
            7 => &[("+", BinOp::Add), ("-", BinOp::Sub)],
            _ => &[("*", BinOp::Mul), ("/", BinOp::Div), ("%", BinOp::Mod)],
        };
        self.ws();
        for (text, op) in ops {
            let r = self.rest();
            // `|` is not the start of `||`, nor `&` of `&&`.
            let doubled = matches!(op, BinOp::BitOr | BinOp::BitAnd) && r.len() > 1 && r[1] == r[0];
            if r.starts_with(text.as_bytes()) && !doubled {
                self.lex.pos += text.len();
                return Some(*op);
            }
        }
        if level == 5 {
            if self.eat_word("isnt") {
                return Some(BinOp::Isnt);
            }
            if self.eat_word("is") {
                return Some(BinOp::Is);
            }
        }
        None
    }

    fn binary(&mut self, level: usize, depth: usize) -> Result<Node, ClassAdError> {
        if level > 8 {
            return self.unary(depth);
        }
        let mut lhs = self.binary(level + 1, depth)?;
        while let Some(op) = self.operator(level) {
            let rhs = self.binary(level + 1, depth)?;
            lhs = self.bin(op, lhs, rhs)?;
        }
        Ok(lhs)
    }

    fn unary(&mut self, depth: usize) -> Result<Node, ClassAdError> {
        if depth > MAX_EXPR_DEPTH {
            return Err(ClassAdError::TooDeep { pos: self.lex.pos });
        }
        self.ws();
        match self.peek() {
            Some(b'-') => {
                self.lex.pos += 1;
                // `-5` is the literal -5 (so i64::MIN is one too).
                if self.peek().is_some_and(|b| b.is_ascii_digit() || b == b'.') {
                    let start = self.lex.pos - 1;
                    return self.postfix(start, depth);
                }
                let (e, h) = self.unary(depth + 1)?;
                Ok((Expr::Unary(UnOp::Neg, Box::new(e)), self.height(h + 1)?))
            }
            Some(b'!') if self.rest().get(1) != Some(&b'=') => {
                self.lex.pos += 1;
                let (e, h) = self.unary(depth + 1)?;
                Ok((Expr::Unary(UnOp::Not, Box::new(e)), self.height(h + 1)?))
            }
            Some(b'+') => {
                self.lex.pos += 1;
                self.unary(depth + 1)
            }
            _ => {
                let start = self.lex.pos;
                self.postfix(start, depth)
            }
        }
    }

    /// A primary starting at `start` (a `-` there belongs to a number),
    /// then any `.name` and `[i]`.
    fn postfix(&mut self, start: usize, depth: usize) -> Result<Node, ClassAdError> {
        let mut node = self.primary(start, depth)?;
        loop {
            // No whitespace before `.`: `1 .5` is not a selection.
            if self.peek() == Some(b'.') {
                self.lex.pos += 1;
                let name = self.lex.name()?;
                let h = self.height(node.1 + 1)?;
                node = match node.0 {
                    Expr::Ad(scope) => (Expr::Attr { scope, name }, h),
                    e => (Expr::Select(Box::new(e), name), h),
                };
            } else if self.eat("[") {
                let i = self.expr(depth + 1)?;
                if !self.eat("]") {
                    return Err(self.err("expected ']'"));
                }
                let h = self.height(1 + node.1.max(i.1))?;
                node = (Expr::Index(Box::new(node.0), Box::new(i.0)), h);
            } else {
                return Ok(node);
            }
        }
    }

    fn primary(&mut self, start: usize, depth: usize) -> Result<Node, ClassAdError> {
        let Some(b) = self.peek() else {
            return Err(self.err("expected an expression"));
        };
        match b {
            b'0'..=b'9' | b'.' => self.number(start),
            b'"' => Ok((Expr::Str(self.lex.quoted(b'"')?), 1)),
            b'\'' => {
                let name = self.lex.name()?;
                Ok((Expr::Attr { scope: Scope::Any, name }, 1))
            }
            b'(' => {
                self.lex.pos += 1;
                let e = self.expr(depth + 1)?;
                if !self.eat(")") {
                    return Err(self.err("expected ')'"));
                }
                Ok(e)
            }
            b'{' => {
                self.lex.pos += 1;
                let items = self.items(b'}', depth)?;
                let h = self.height(1 + items.iter().map(|i| i.1).max().unwrap_or(0))?;
                Ok((Expr::List(items.into_iter().map(|i| i.0).collect()), h))
            }
            b'[' => self.record(depth),
            b if b.is_ascii_alphabetic() || b == b'_' => self.word(depth),
            _ => Err(self.err("expected an expression")),
        }
    }

    /// A number literal, `-` included when `start` is on one.
    fn number(&mut self, start: usize) -> Result<Node, ClassAdError> {
        let s = self.lex.s;
        let mut i = self.lex.pos;
        while i < s.len() {
            let b = s[i];
            let sign_in_exponent = matches!(b, b'+' | b'-') && matches!(s[i - 1], b'e' | b'E') && !is_hex(&s[start..i]);
            if b.is_ascii_alphanumeric() || b == b'.' || sign_in_exponent {
                i += 1;
            } else {
                break;
            }
        }
        let raw = &self.lex.text[start..i];
        let value = if let Some(n) = integer(raw) {
            Expr::Int(n)
        } else if let Some(r) = real(raw) {
            Expr::Real(r)
        } else {
            return Err(self.err("bad number"));
        };
        self.lex.pos = i;
        Ok((value, 1))
    }

    /// Comma-separated expressions up to `close` (consumed).
    fn items(&mut self, close: u8, depth: usize) -> Result<Vec<Node>, ClassAdError> {
        let mut items = Vec::new();
        self.ws();
        if self.peek() == Some(close) {
            self.lex.pos += 1;
            return Ok(items);
        }
        loop {
            items.push(self.expr(depth + 1)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.lex.pos += 1,
                Some(c) if c == close => {
                    self.lex.pos += 1;
                    return Ok(items);
                }
                _ => return Err(self.err("expected ',' or a closing bracket")),
            }
        }
    }

    fn record(&mut self, depth: usize) -> Result<Node, ClassAdError> {
        self.lex.pos += 1;
        let mut attrs: Vec<(String, Expr)> = Vec::new();
        let mut h = 0;
        loop {
            self.ws();
            if self.peek() == Some(b']') {
                self.lex.pos += 1;
                break;
            }
            let name = self.lex.name()?;
            if !self.eat("=") {
                return Err(self.err("expected '=' after the attribute name"));
            }
            let (e, eh) = self.expr(depth + 1)?;
            h = h.max(eh);
            // A name given twice keeps its first place and its last value.
            match attrs.iter_mut().find(|(n, _)| n.eq_ignore_ascii_case(&name)) {
                Some(slot) => *slot = (name, e),
                None => attrs.push((name, e)),
            }
            self.ws();
            match self.peek() {
                Some(b';') => self.lex.pos += 1,
                Some(b']') => {}
                _ => return Err(self.err("expected ';' or ']'")),
            }
        }
        Ok((Expr::Record(attrs), self.height(h + 1)?))
    }

    /// A keyword, a scope, a reference or a call.
    fn word(&mut self, depth: usize) -> Result<Node, ClassAdError> {
        let start = self.lex.pos;
        while self.peek().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
            self.lex.pos += 1;
        }
        let word = &self.lex.text[start..self.lex.pos];
        for (kw, e) in [("true", Expr::Bool(true)), ("false", Expr::Bool(false)), ("undefined", Expr::Undefined), ("error", Expr::Error)] {
            if word.eq_ignore_ascii_case(kw) {
                return Ok((e, 1));
            }
        }
        if !is_identifier(word) {
            self.lex.pos = start;
            return Err(self.err("expected an expression"));
        }
        let word = word.to_string();
        let after = self.lex.pos;
        self.ws();
        if self.peek() == Some(b'(') {
            self.lex.pos += 1;
            let args = self.items(b')', depth)?;
            let h = self.height(1 + args.iter().map(|a| a.1).max().unwrap_or(0))?;
            return Ok((Expr::Call(word, args.into_iter().map(|a| a.0).collect()), h));
        }
        self.lex.pos = after;
        if let Some(scope) = is_scope_word(&word) {
            return Ok((Expr::Ad(scope), 1));
        }
        Ok((Expr::Attr { scope: Scope::Any, name: word }, 1))
    }
}

fn is_hex(raw: &[u8]) -> bool {
    let r = raw.strip_prefix(b"-").unwrap_or(raw);
    r.starts_with(b"0x") || r.starts_with(b"0X")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Expr {
        Expr::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn attr(name: &str) -> Expr {
        Expr::Attr { scope: Scope::Any, name: name.into() }
    }

    #[test]
    fn precedence_and_forms() {
        assert_eq!(p("a || b && c"), Expr::Binary(BinOp::Or, Box::new(attr("a")), Box::new(p("b && c"))));
        assert_eq!(p("1 + 2 * 3"), p("1 + (2 * 3)"));
        assert_eq!(p("a == b < c"), p("a == (b < c)"));
        assert_eq!(p("a - b - c"), p("(a - b) - c"));
        assert_eq!(p("-5"), Expr::Int(-5));
        assert_eq!(p("-9223372036854775808"), Expr::Int(i64::MIN));
        assert_eq!(p("- x"), Expr::Unary(UnOp::Neg, Box::new(attr("x"))));
        assert_eq!(p("1.5e-3"), Expr::Real(0.0015));
        assert_eq!(p("0x1e-3"), Expr::Binary(BinOp::Sub, Box::new(Expr::Int(30)), Box::new(Expr::Int(3))));
        assert_eq!(p("other.Name"), Expr::Attr { scope: Scope::Target, name: "Name".into() });
        assert_eq!(p("my.Name"), Expr::Attr { scope: Scope::My, name: "Name".into() });
        assert_eq!(p("TARGET"), Expr::Ad(Scope::Target));
        assert_eq!(p("Load.Queued"), Expr::Select(Box::new(attr("Load")), "Queued".into()));
        assert_eq!(p("a is b"), p("a =?= b"));
        assert_eq!(p("a isnt b"), p("a =!= b"));
        assert_eq!(p("isX"), attr("isX"));
        assert_eq!(p("f()"), Expr::Call("f".into(), vec![]));
        assert_eq!(p("{ }"), Expr::List(vec![]));
        assert_eq!(p("[ a = 1; a = 2; ]"), Expr::Record(vec![("a".into(), Expr::Int(2))]));
        assert_eq!(p("'odd name'"), attr("odd name"));
        assert_eq!(p("c ? 1 : 2"), Expr::Cond(Box::new(attr("c")), Box::new(Expr::Int(1)), Box::new(Expr::Int(2))));
    }

    #[test]
    fn errors() {
        for bad in ["", "1 +", "(1", "f(1,", "{1 2}", "a ? b", "1.x", "true = 1", "is", "[a 1]", "a.", "5 5", "a\0", "!", "@"] {
            assert!(Expr::parse(bad).is_err(), "{bad:?}");
        }
        let deep = format!("{}1{}", "(".repeat(MAX_EXPR_DEPTH + 2), ")".repeat(MAX_EXPR_DEPTH + 2));
        assert!(matches!(Expr::parse(&deep), Err(ClassAdError::TooDeep { .. })));
        let long = vec!["1"; 10_000].join(" + ");
        assert!(matches!(Expr::parse(&long), Err(ClassAdError::TooDeep { .. })));
        let ok = vec!["1"; MAX_EXPR_DEPTH].join(" + ");
        assert!(Expr::parse(&ok).is_ok());
    }

    #[test]
    fn display_reads_back() {
        for text in [
            "member(other.Name, GoodPeople) * 500",
            "(0.5).x",
            "(-5)[1]",
            "-(5)",
            "'my'.x",
            "MY.'other'",
            "[a = {1, \"x\\n\"}; 'b c' = undefined].a[0]",
            "a =?= error || !b",
            "x ? y : z ? 1e300 : -0.25",
        ] {
            let e = p(text);
            assert_eq!(p(&e.to_string()), e, "{text} -> {e}");
        }
        assert_eq!(p("1 + 2 * x").to_string(), "(1 + (2 * x))");
    }

    #[test]
    fn calls_are_listed() {
        let mut names = Vec::new();
        let e = p("f(g(1), {h()}) + [a = k()].a");
        e.calls(&mut names);
        assert_eq!(names, vec!["f", "g", "h", "k"]);
    }
}
