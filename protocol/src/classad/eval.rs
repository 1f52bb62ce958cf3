//! ClassAd evaluation for two-sided matchmaking: pure, no IO.
//!
//! Semantics follow HTCondor's ClassAds where they matter for
//! Requirements and Rank:
//!
//! * an unqualified name is looked up in the ad the expression belongs to,
//!   then in the other ad; `MY.x` and `TARGET.x` (`other.x`) look in one;
//!   an attribute of the other ad is evaluated in that ad's own scope; a
//!   missing attribute is `undefined`;
//! * `undefined` and `error` propagate through arithmetic and comparisons
//!   (`error` wins); `&&` and `||` are three-valued and lazy (`false &&
//!   error` is `false`); a value of the wrong type is `error`;
//! * numbers compare numerically, strings with `==`/`<` ignoring case,
//!   booleans take part in arithmetic as 0/1;
//! * `=?=` and `=!=` (`is`, `isnt`) never give `undefined`: same type and
//!   same value (strings case-sensitive);
//! * built-ins: `member`, `identicalMember`, `isUndefined`, `isError`,
//!   `isString`, `isInteger`, `isReal`, `isBoolean`, `isList`,
//!   `ifThenElse` (lazy), `size`, `strcat`, `toLower`, `toUpper`, `int`,
//!   `real`, `floor`, `ceiling`, `round`; any other name is asked of the
//!   caller's [`Functions`], and is `error` if it does not know it.
//!
//! A chain of references deeper than [`MAX_REFERENCE_DEPTH`] (a cycle such
//! as `A = B; B = A`) is `error`, and so is every reference after the
//! first [`MAX_REFERENCES`] of one [`Env`], so evaluation always ends soon.

use std::collections::HashMap;

use super::expr::{BinOp, Expr, Scope, UnOp};
use super::{ClassAd, ClassAdError, Value};

/// Nested attribute references followed before giving `error`.
pub const MAX_REFERENCE_DEPTH: usize = 16;

/// Attribute references one [`Env`] follows in all, after which every
/// further one is `error`: the depth bound alone lets `A = B + B + B; B =
/// A + A + A` take 3^16 steps.
pub const MAX_REFERENCES: usize = 100_000;

/// An evaluated value.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Undefined,
    Error,
    Bool(bool),
    Int(i64),
    Real(f64),
    Str(String),
    List(Vec<Val>),
    Record(Vec<(String, Val)>),
    /// A whole ad of the match: 0 is the left ad, 1 the right one.
    Ad(usize),
}

impl Val {
    /// The number a Rank stands for: numbers as they are, booleans 0/1,
    /// anything else 0 (HTCondor treats a non-numeric Rank as zero).
    pub fn as_rank(&self) -> f64 {
        match self {
            Val::Int(i) => *i as f64,
            Val::Real(r) if r.is_finite() => *r,
            Val::Bool(b) => f64::from(u8::from(*b)),
            _ => 0.0,
        }
    }

    /// Whether a Requirements value admits the match: `true` or a non-zero
    /// number; `undefined`, `error` and the rest do not.
    pub fn is_true(&self) -> bool {
        matches!(bool_equiv(self), Some(true))
    }
}

/// An ad ready for evaluation: every attribute as an expression.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvalAd {
    attrs: Vec<(String, Expr)>,
    index: HashMap<String, usize>,
}

impl EvalAd {
    pub fn new() -> Self {
        EvalAd::default()
    }

    /// The ad's literals as they are and its `Expr` values parsed.
    pub fn from_classad(ad: &ClassAd) -> Result<EvalAd, ClassAdError> {
        let mut out = EvalAd::new();
        for (name, value) in ad.iter() {
            out.insert(name, literal_expr(value)?);
        }
        Ok(out)
    }

    /// Parses `[ A = expr; ... ]` with full expressions as values.
    pub fn parse(text: &str) -> Result<EvalAd, ClassAdError> {
        match Expr::parse(text)? {
            Expr::Record(attrs) => {
                let mut out = EvalAd::new();
                for (name, e) in attrs {
                    out.insert(&name, e);
                }
                Ok(out)
            }
            _ => Err(ClassAdError::Syntax { pos: 0, what: "expected '['" }),
        }
    }

    /// Sets `name` (ignoring ASCII case), replacing an earlier value.
    pub fn insert(&mut self, name: &str, expr: Expr) {
        match self.index.get(&name.to_ascii_lowercase()) {
            Some(&i) => self.attrs[i] = (name.to_string(), expr),
            None => {
                self.index.insert(name.to_ascii_lowercase(), self.attrs.len());
                self.attrs.push((name.to_string(), expr));
            }
        }
    }

    pub fn get(&self, name: &str) -> Option<&Expr> {
        self.lookup(name).map(|i| &self.attrs[i].1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Expr)> {
        self.attrs.iter().map(|(n, e)| (n.as_str(), e))
    }

    fn lookup(&self, name: &str) -> Option<usize> {
        // Names are almost always ASCII identifiers; avoid allocating when
        // the name is already lower case.
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            self.index.get(&name.to_ascii_lowercase()).copied()
        } else {
            self.index.get(name).copied()
        }
    }
}

/// The expression a parsed attribute value stands for.
pub fn literal_expr(value: &Value) -> Result<Expr, ClassAdError> {
    Ok(match value {
        Value::Str(s) => Expr::Str(s.clone()),
        Value::Int(i) => Expr::Int(*i),
        Value::Real(r) => Expr::Real(*r),
        Value::Bool(b) => Expr::Bool(*b),
        Value::Undefined => Expr::Undefined,
        Value::Error => Expr::Error,
        Value::Expr(text) => Expr::parse(text)?,
    })
}

/// Functions the caller provides (external or data-aware ones). `None`
/// means "not mine": the call is then `error`.
pub trait Functions {
    fn call(&self, name: &str, args: &[Val], env: &Env<'_>) -> Option<Val>;
}

/// No functions beyond the built-ins.
pub struct NoFunctions;

impl Functions for NoFunctions {
    fn call(&self, _: &str, _: &[Val], _: &Env<'_>) -> Option<Val> {
        None
    }
}

/// The two ads of a match and the functions in force.
pub struct Env<'a> {
    ads: [&'a EvalAd; 2],
    functions: &'a dyn Functions,
    references: std::cell::Cell<usize>,
}

impl<'a> Env<'a> {
    pub fn new(left: &'a EvalAd, right: &'a EvalAd, functions: &'a dyn Functions) -> Self {
        Env { ads: [left, right], functions, references: std::cell::Cell::new(0) }
    }

    /// Evaluates attribute `name` of ad `side` (0 left, 1 right) in that
    /// ad's scope; `undefined` if it has none.
    pub fn attr(&self, side: usize, name: &str) -> Val {
        self.attr_at(side & 1, name, 0)
    }

    /// Evaluates `expr` as if it were an attribute of ad `side`.
    pub fn eval(&self, side: usize, expr: &Expr) -> Val {
        Frame { env: self, my: side & 1, depth: 0 }.eval(expr)
    }

    fn attr_at(&self, side: usize, name: &str, depth: usize) -> Val {
        let n = self.references.get() + 1;
        self.references.set(n);
        if depth > MAX_REFERENCE_DEPTH || n > MAX_REFERENCES {
            return Val::Error;
        }
        match self.ads[side].get(name) {
            Some(e) => Frame { env: self, my: side, depth: depth + 1 }.eval(e),
            None => Val::Undefined,
        }
    }
}

/// One evaluation: which ad is MY, and how many references deep we are.
struct Frame<'e, 'a> {
    env: &'e Env<'a>,
    my: usize,
    depth: usize,
}

fn bool_equiv(v: &Val) -> Option<bool> {
    match v {
        Val::Bool(b) => Some(*b),
        Val::Int(i) => Some(*i != 0),
        Val::Real(r) => Some(*r != 0.0),
        _ => None,
    }
}

/// Numbers for arithmetic: booleans count as 0/1.
enum Num {
    I(i64),
    R(f64),
}

fn num(v: &Val) -> Option<Num> {
    match v {
        Val::Int(i) => Some(Num::I(*i)),
        Val::Real(r) => Some(Num::R(*r)),
        Val::Bool(b) => Some(Num::I(i64::from(*b))),
        _ => None,
    }
}

fn as_f64(n: &Num) -> f64 {
    match n {
        Num::I(i) => *i as f64,
        Num::R(r) => *r,
    }
}

impl Frame<'_, '_> {
    fn target(&self) -> usize {
        1 - self.my
    }

    fn eval(&self, e: &Expr) -> Val {
        match e {
            Expr::Int(i) => Val::Int(*i),
            Expr::Real(r) => Val::Real(*r),
            Expr::Str(s) => Val::Str(s.clone()),
            Expr::Bool(b) => Val::Bool(*b),
            Expr::Undefined => Val::Undefined,
            Expr::Error => Val::Error,
            Expr::Attr { scope, name } => self.reference(*scope, name),
            Expr::Ad(Scope::My) => Val::Ad(self.my),
            Expr::Ad(_) => Val::Ad(self.target()),
            Expr::Select(base, name) => match self.eval(base) {
                Val::Record(attrs) => attrs.into_iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map_or(Val::Undefined, |(_, v)| v),
                Val::Ad(side) => self.env.attr_at(side, name, self.depth),
                Val::Undefined => Val::Undefined,
                _ => Val::Error,
            },
            Expr::Index(base, i) => match (self.eval(base), self.eval(i)) {
                (Val::Error, _) | (_, Val::Error) => Val::Error,
                (Val::Undefined, _) | (_, Val::Undefined) => Val::Undefined,
                (Val::List(items), Val::Int(i)) => usize::try_from(i).ok().and_then(|i| items.into_iter().nth(i)).unwrap_or(Val::Error),
                (Val::Record(attrs), Val::Str(name)) => {
                    attrs.into_iter().find(|(n, _)| n.eq_ignore_ascii_case(&name)).map_or(Val::Undefined, |(_, v)| v)
                }
                _ => Val::Error,
            },
            Expr::Unary(UnOp::Neg, x) => match self.eval(x) {
                Val::Int(i) => Val::Int(i.wrapping_neg()),
                Val::Real(r) => Val::Real(-r),
                Val::Bool(b) => Val::Int(-i64::from(b)),
                Val::Undefined => Val::Undefined,
                _ => Val::Error,
            },
            Expr::Unary(UnOp::Not, x) => match self.eval(x) {
                Val::Undefined => Val::Undefined,
                v => bool_equiv(&v).map_or(Val::Error, |b| Val::Bool(!b)),
            },
            Expr::Binary(BinOp::And, a, b) => self.logic(a, b, false),
            Expr::Binary(BinOp::Or, a, b) => self.logic(a, b, true),
            Expr::Binary(op, a, b) => binary(*op, self.eval(a), self.eval(b)),
            Expr::Cond(c, a, b) => self.choose(c, a, b),
            Expr::Call(name, args) => self.call(name, args),
            Expr::List(items) => Val::List(items.iter().map(|i| self.eval(i)).collect()),
            // Names inside a record literal refer to the enclosing ads.
            Expr::Record(attrs) => Val::Record(attrs.iter().map(|(n, e)| (n.clone(), self.eval(e))).collect()),
        }
    }

    fn reference(&self, scope: Scope, name: &str) -> Val {
        match scope {
            Scope::My => self.env.attr_at(self.my, name, self.depth),
            Scope::Target => self.env.attr_at(self.target(), name, self.depth),
            Scope::Any => {
                if self.env.ads[self.my].lookup(name).is_some() {
                    self.env.attr_at(self.my, name, self.depth)
                } else {
                    self.env.attr_at(self.target(), name, self.depth)
                }
            }
        }
    }

    /// `&&` (`short` false) and `||` (`short` true), three-valued and lazy.
    fn logic(&self, a: &Expr, b: &Expr, short: bool) -> Val {
        let left = match self.eval(a) {
            Val::Undefined => None,
            v => match bool_equiv(&v) {
                Some(x) if x == short => return Val::Bool(short),
                Some(_) => Some(!short),
                None => return Val::Error,
            },
        };
        match self.eval(b) {
            Val::Undefined => Val::Undefined,
            v => match bool_equiv(&v) {
                Some(x) if x == short => Val::Bool(short),
                Some(_) => left.map_or(Val::Undefined, Val::Bool),
                None => Val::Error,
            },
        }
    }

    fn choose(&self, c: &Expr, a: &Expr, b: &Expr) -> Val {
        match self.eval(c) {
            Val::Undefined => Val::Undefined,
            v => match bool_equiv(&v) {
                Some(true) => self.eval(a),
                Some(false) => self.eval(b),
                None => Val::Error,
            },
        }
    }

    fn call(&self, name: &str, args: &[Expr]) -> Val {
        let lower = name.to_ascii_lowercase();
        if lower == "ifthenelse" {
            return match args {
                [c, a, b] => self.choose(c, a, b),
                _ => Val::Error,
            };
        }
        let vals: Vec<Val> = args.iter().map(|a| self.eval(a)).collect();
        if let Some(v) = builtin(&lower, &vals) {
            return v;
        }
        self.env.functions.call(name, &vals, self.env).unwrap_or(Val::Error)
    }
}

/// The built-in functions but `ifThenElse`; `None` if `name` is not one.
fn builtin(name: &str, args: &[Val]) -> Option<Val> {
    let one = || if let [v] = args { Some(v) } else { None };
    let is = |pred: fn(&Val) -> bool| Some(one().map_or(Val::Error, |v| Val::Bool(pred(v))));
    match name {
        "isundefined" => is(|v| matches!(v, Val::Undefined)),
        "iserror" => is(|v| matches!(v, Val::Error)),
        "isstring" => is(|v| matches!(v, Val::Str(_))),
        "isinteger" => is(|v| matches!(v, Val::Int(_))),
        "isreal" => is(|v| matches!(v, Val::Real(_))),
        "isboolean" => is(|v| matches!(v, Val::Bool(_))),
        "islist" => is(|v| matches!(v, Val::List(_))),
        "member" | "identicalmember" => Some(match args {
            [_, Val::Error] | [Val::Error, _] => Val::Error,
            [_, Val::Undefined] | [Val::Undefined, _] => Val::Undefined,
            [x, Val::List(items)] if !matches!(x, Val::List(_) | Val::Record(_) | Val::Ad(_)) => {
                let op = if name == "member" { BinOp::Eq } else { BinOp::Is };
                Val::Bool(items.iter().any(|i| binary(op, x.clone(), i.clone()) == Val::Bool(true)))
            }
            _ => Val::Error,
        }),
        "size" => Some(match one() {
            Some(Val::Str(s)) => Val::Int(s.chars().count() as i64),
            Some(Val::List(items)) => Val::Int(items.len() as i64),
            Some(Val::Record(attrs)) => Val::Int(attrs.len() as i64),
            Some(Val::Undefined) => Val::Undefined,
            _ => Val::Error,
        }),
        "strcat" => {
            let mut out = String::new();
            for a in args {
                match a {
                    Val::Error => return Some(Val::Error),
                    Val::Undefined => return Some(Val::Undefined),
                    Val::Str(s) => out.push_str(s),
                    Val::Int(i) => out.push_str(&i.to_string()),
                    Val::Real(r) => out.push_str(&Value::Real(*r).to_string()),
                    Val::Bool(b) => out.push_str(&b.to_string()),
                    _ => return Some(Val::Error),
                }
            }
            Some(Val::Str(out))
        }
        "tolower" | "toupper" => Some(match one() {
            Some(Val::Str(s)) => Val::Str(if name == "tolower" { s.to_lowercase() } else { s.to_uppercase() }),
            Some(Val::Undefined) => Val::Undefined,
            _ => Val::Error,
        }),
        "int" => Some(match one() {
            Some(Val::Int(i)) => Val::Int(*i),
            Some(Val::Real(r)) if r.is_finite() => Val::Int(r.trunc() as i64),
            Some(Val::Bool(b)) => Val::Int(i64::from(*b)),
            Some(Val::Str(s)) => s
                .trim()
                .parse::<i64>()
                .ok()
                .or_else(|| s.trim().parse::<f64>().ok().filter(|r| r.is_finite()).map(|r| r.trunc() as i64))
                .map_or(Val::Error, Val::Int),
            Some(Val::Undefined) => Val::Undefined,
            _ => Val::Error,
        }),
        "real" => Some(match one() {
            Some(Val::Int(i)) => Val::Real(*i as f64),
            Some(Val::Real(r)) => Val::Real(*r),
            Some(Val::Bool(b)) => Val::Real(f64::from(u8::from(*b))),
            Some(Val::Str(s)) => s.trim().parse::<f64>().map_or(Val::Error, Val::Real),
            Some(Val::Undefined) => Val::Undefined,
            _ => Val::Error,
        }),
        "floor" | "ceiling" | "round" => Some(match one() {
            Some(Val::Int(i)) => Val::Int(*i),
            Some(Val::Real(r)) if r.is_finite() => {
                let r = match name {
                    "floor" => r.floor(),
                    "ceiling" => r.ceil(),
                    _ => r.round(),
                };
                Val::Int(r as i64)
            }
            Some(Val::Undefined) => Val::Undefined,
            _ => Val::Error,
        }),
        _ => None,
    }
}

/// Every strict binary operator (all but `&&` and `||`).
fn binary(op: BinOp, a: Val, b: Val) -> Val {
    match op {
        BinOp::Is => return Val::Bool(identical(&a, &b)),
        BinOp::Isnt => return Val::Bool(!identical(&a, &b)),
        _ => {}
    }
    match (&a, &b) {
        (Val::Error, _) | (_, Val::Error) => return Val::Error,
        (Val::Undefined, _) | (_, Val::Undefined) => return Val::Undefined,
        _ => {}
    }
    match op {
        BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => compare(op, &a, &b),
        BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor => match (a, b) {
            (Val::Int(x), Val::Int(y)) => Val::Int(match op {
                BinOp::BitAnd => x & y,
                BinOp::BitOr => x | y,
                _ => x ^ y,
            }),
            (Val::Bool(x), Val::Bool(y)) => Val::Bool(match op {
                BinOp::BitAnd => x & y,
                BinOp::BitOr => x | y,
                _ => x ^ y,
            }),
            _ => Val::Error,
        },
        _ => arithmetic(op, &a, &b),
    }
}

fn arithmetic(op: BinOp, a: &Val, b: &Val) -> Val {
    let (Some(x), Some(y)) = (num(a), num(b)) else {
        return Val::Error;
    };
    match (x, y) {
        (Num::I(x), Num::I(y)) => match op {
            BinOp::Add => Val::Int(x.wrapping_add(y)),
            BinOp::Sub => Val::Int(x.wrapping_sub(y)),
            BinOp::Mul => Val::Int(x.wrapping_mul(y)),
            BinOp::Div if y == 0 => Val::Error,
            BinOp::Div => Val::Int(x.wrapping_div(y)),
            BinOp::Mod if y == 0 => Val::Error,
            BinOp::Mod => Val::Int(x.wrapping_rem(y)),
            _ => Val::Error,
        },
        (x, y) => {
            let (x, y) = (as_f64(&x), as_f64(&y));
            match op {
                BinOp::Add => Val::Real(x + y),
                BinOp::Sub => Val::Real(x - y),
                BinOp::Mul => Val::Real(x * y),
                BinOp::Div | BinOp::Mod if y == 0.0 => Val::Error,
                BinOp::Div => Val::Real(x / y),
                BinOp::Mod => Val::Real(x % y),
                _ => Val::Error,
            }
        }
    }
}

fn compare(op: BinOp, a: &Val, b: &Val) -> Val {
    use std::cmp::Ordering;
    let ord: Option<Ordering> = match (a, b) {
        (Val::Str(x), Val::Str(y)) => Some(x.to_lowercase().cmp(&y.to_lowercase())),
        (Val::Bool(x), Val::Bool(y)) if matches!(op, BinOp::Eq | BinOp::Ne) => Some(x.cmp(y)),
        _ => match (num(a), num(b)) {
            (Some(Num::I(x)), Some(Num::I(y))) => Some(x.cmp(&y)),
            (Some(x), Some(y)) => as_f64(&x).partial_cmp(&as_f64(&y)),
            _ => return Val::Error,
        },
    };
    let Some(ord) = ord else {
        // NaN: unordered, unequal.
        return Val::Bool(op == BinOp::Ne);
    };
    Val::Bool(match op {
        BinOp::Eq => ord == Ordering::Equal,
        BinOp::Ne => ord != Ordering::Equal,
        BinOp::Lt => ord == Ordering::Less,
        BinOp::Le => ord != Ordering::Greater,
        BinOp::Gt => ord == Ordering::Greater,
        _ => ord != Ordering::Less,
    })
}

/// `=?=`: the same type and the same value; strings case-sensitive.
fn identical(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Real(x), Val::Real(y)) => x == y || (x.is_nan() && y.is_nan()),
        (Val::List(x), Val::List(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| identical(p, q)),
        (Val::Record(x), Val::Record(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|((n, p), (m, q))| n.eq_ignore_ascii_case(m) && identical(p, q))
        }
        _ => a == b,
    }
}

/// Two-sided matchmaking of one `left` ad against one `right` ad: both
/// `Requirements` must be true.
pub fn requirements_met(env: &Env<'_>) -> bool {
    env.attr(0, "Requirements").is_true() && env.attr(1, "Requirements").is_true()
}

/// Each side's `Rank` of the other, as numbers.
pub fn ranks(env: &Env<'_>) -> (f64, f64) {
    (env.attr(0, "Rank").as_rank(), env.attr(1, "Rank").as_rank())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ad(text: &str) -> EvalAd {
        EvalAd::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// `expr` evaluated as an attribute of `my` against `target`.
    fn eval_in(expr: &str, my: &EvalAd, target: &EvalAd) -> Val {
        let e = Expr::parse(expr).unwrap_or_else(|err| panic!("{expr}: {err}"));
        Env::new(my, target, &NoFunctions).eval(0, &e)
    }

    fn ev(expr: &str) -> Val {
        eval_in(expr, &EvalAd::new(), &EvalAd::new())
    }

    #[test]
    fn arithmetic_and_comparison() {
        assert_eq!(ev("1 + 2 * 3"), Val::Int(7));
        assert_eq!(ev("(1 + 2) * 3"), Val::Int(9));
        assert_eq!(ev("7 / 2"), Val::Int(3));
        assert_eq!(ev("7 % 3"), Val::Int(1));
        assert_eq!(ev("7.0 / 2"), Val::Real(3.5));
        assert_eq!(ev("1 / 0"), Val::Error);
        assert_eq!(ev("1.5 % 0"), Val::Error);
        assert_eq!(ev("-9223372036854775808 / -1"), Val::Int(i64::MIN));
        assert_eq!(ev("true * 500"), Val::Int(500));
        assert_eq!(ev("\"a\" + 1"), Val::Error);
        assert_eq!(ev("- 3"), Val::Int(-3));
        assert_eq!(ev("-(3)"), Val::Int(-3));
        assert_eq!(ev("2 < 3.5"), Val::Bool(true));
        assert_eq!(ev("\"ABC\" == \"abc\""), Val::Bool(true));
        assert_eq!(ev("\"abc\" < \"ABD\""), Val::Bool(true));
        assert_eq!(ev("\"1\" == 1"), Val::Error);
        assert_eq!(ev("5 & 3"), Val::Int(1));
        assert_eq!(ev("5 | 3"), Val::Int(7));
        assert_eq!(ev("5 ^ 3"), Val::Int(6));
        assert_eq!(ev("{1, 2, 3}[1]"), Val::Int(2));
        assert_eq!(ev("{1, 2, 3}[3]"), Val::Error);
        assert_eq!(ev("[a = 1; b = \"x\"].B"), Val::Str("x".into()));
        assert_eq!(ev("[a = 1].c"), Val::Undefined);
    }

    #[test]
    fn undefined_and_error() {
        assert_eq!(ev("Missing + 1"), Val::Undefined);
        assert_eq!(ev("Missing == 1"), Val::Undefined);
        assert_eq!(ev("error + undefined"), Val::Error);
        assert_eq!(ev("Missing =?= undefined"), Val::Bool(true));
        assert_eq!(ev("Missing =!= undefined"), Val::Bool(false));
        assert_eq!(ev("Missing is undefined"), Val::Bool(true));
        assert_eq!(ev("1 isnt 1.0"), Val::Bool(true));
        assert_eq!(ev("\"a\" =?= \"A\""), Val::Bool(false));
        assert_eq!(ev("error =?= error"), Val::Bool(true));
        assert_eq!(ev("false && error"), Val::Bool(false));
        assert_eq!(ev("true || error"), Val::Bool(true));
        assert_eq!(ev("undefined && false"), Val::Bool(false));
        assert_eq!(ev("undefined && true"), Val::Undefined);
        assert_eq!(ev("undefined || true"), Val::Bool(true));
        assert_eq!(ev("undefined || false"), Val::Undefined);
        assert_eq!(ev("true && \"x\""), Val::Error);
        assert_eq!(ev("error && false"), Val::Error);
        assert_eq!(ev("!undefined"), Val::Undefined);
        assert_eq!(ev("!0"), Val::Bool(true));
        assert_eq!(ev("isUndefined(Missing)"), Val::Bool(true));
        assert_eq!(ev("isUndefined(1)"), Val::Bool(false));
        assert_eq!(ev("isError(1/0)"), Val::Bool(true));
        assert_eq!(ev("isUndefined()"), Val::Error);
        assert_eq!(ev("no_such_function(1)"), Val::Error);
    }

    #[test]
    fn conditionals_are_lazy() {
        assert_eq!(ev("ifThenElse(true, 1, 1/0)"), Val::Int(1));
        assert_eq!(ev("ifThenElse(false, 1/0, 2)"), Val::Int(2));
        assert_eq!(ev("ifThenElse(undefined, 1, 2)"), Val::Undefined);
        assert_eq!(ev("ifThenElse(\"x\", 1, 2)"), Val::Error);
        assert_eq!(ev("ifThenElse(1, 2)"), Val::Error);
        assert_eq!(ev("1 < 2 ? \"y\" : \"n\""), Val::Str("y".into()));
        assert_eq!(ev("0 ? 1 : 2 ? 3 : 4"), Val::Int(3));
    }

    #[test]
    fn member_and_lists() {
        assert_eq!(ev("member(\"B\", {\"a\", \"b\"})"), Val::Bool(true));
        assert_eq!(ev("identicalMember(\"B\", {\"a\", \"b\"})"), Val::Bool(false));
        assert_eq!(ev("member(3, {1, 2})"), Val::Bool(false));
        assert_eq!(ev("member(2, {1, 2.0})"), Val::Bool(true));
        assert_eq!(ev("member(Missing, {1})"), Val::Undefined);
        assert_eq!(ev("member(1, Missing)"), Val::Undefined);
        assert_eq!(ev("member(1, 2)"), Val::Error);
        assert_eq!(ev("size({1, 2, 3})"), Val::Int(3));
        assert_eq!(ev("size(\"héllo\")"), Val::Int(5));
        assert_eq!(ev("strcat(\"a\", 1, true, 2.5)"), Val::Str("a1true2.5".into()));
        assert_eq!(ev("toLower(\"AbC\")"), Val::Str("abc".into()));
        assert_eq!(ev("int(\"42\") + int(2.9) + round(2.5) + floor(-0.5) + ceiling(0.1)"), Val::Int(47));
        assert_eq!(ev("real(3)"), Val::Real(3.0));
    }

    #[test]
    fn scopes_in_a_match() {
        // Figure 1 of the SAMGrid paper, and a job against it.
        let site = ad(r#"[ Type = "GridSite"; Name = "Fermi";
            Load = [ QueuedJobs = 40; RunningJobs = 200 ];
            Requirements = other.Type == "Job" && Load.QueuedJobs < 100;
            GoodPeople = { "howard", "harry" };
            Rank = member(other.Owner, GoodPeople) * 500 ]"#);
        let job = ad(r#"[ Type = "Job"; Owner = "Harry"; Name = "j1";
            Requirements = TARGET.Type == "GridSite" && MY.Name =!= other.Name;
            Rank = other.Load.RunningJobs ]"#);
        let env = Env::new(&job, &site, &NoFunctions);
        assert!(requirements_met(&env));
        assert_eq!(ranks(&env), (200.0, 500.0));
        // An unqualified name not in this ad is looked up in the other.
        assert_eq!(eval_in("Owner", &site, &job), Val::Str("Harry".into()));
        assert_eq!(eval_in("MY.Owner", &site, &job), Val::Undefined);
        // The other ad's attribute is evaluated in its own scope: site's
        // Rank refers to *its* other, the job.
        assert_eq!(eval_in("TARGET.Rank", &job, &site), Val::Int(500));
        // Requirements that fail on one side fail the match.
        let busy = ad(r#"[ Type = "GridSite"; Load = [ QueuedJobs = 540 ]; Requirements = Load.QueuedJobs < 100 ]"#);
        assert!(!requirements_met(&Env::new(&job, &busy, &NoFunctions)));
        // A missing Requirements is undefined: no match.
        assert!(!requirements_met(&Env::new(&job, &EvalAd::new(), &NoFunctions)));
    }

    #[test]
    fn reference_cycles_end_in_error() {
        let a = ad("[ A = B + 1; B = A; C = C; R = TARGET.X ]");
        let b = ad("[ X = TARGET.R ]");
        assert_eq!(eval_in("A", &a, &EvalAd::new()), Val::Error);
        assert_eq!(eval_in("C", &a, &EvalAd::new()), Val::Error);
        assert_eq!(eval_in("R", &a, &b), Val::Error);
    }

    #[test]
    fn exponential_reference_fans_end_quickly() {
        let a = ad("[ A = B + B + B + B; B = A + A + A + A; C = 1 ]");
        let started = std::time::Instant::now();
        let env = Env::new(&a, &a, &NoFunctions);
        assert_eq!(env.attr(0, "A"), Val::Error);
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        // The budget is per Env: a new one evaluates normally.
        assert_eq!(Env::new(&a, &a, &NoFunctions).attr(0, "C"), Val::Int(1));
    }

    #[test]
    fn caller_functions_see_both_ads() {
        struct Overlap;
        impl Functions for Overlap {
            fn call(&self, name: &str, args: &[Val], env: &Env<'_>) -> Option<Val> {
                if !name.eq_ignore_ascii_case("overlap") {
                    return None;
                }
                match args {
                    [Val::Ad(side)] => match env.attr(*side, "Name") {
                        Val::Str(s) if s == "near" => Some(Val::Real(0.9)),
                        _ => Some(Val::Real(0.1)),
                    },
                    _ => Some(Val::Error),
                }
            }
        }
        let job = ad("[ Rank = overlap(other) ]");
        let near = ad("[ Name = \"near\" ]");
        let far = ad("[ Name = \"far\" ]");
        assert_eq!(Env::new(&job, &near, &Overlap).attr(0, "Rank"), Val::Real(0.9));
        assert_eq!(Env::new(&job, &far, &Overlap).attr(0, "Rank"), Val::Real(0.1));
        assert_eq!(Env::new(&job, &far, &Overlap).eval(0, &Expr::parse("overlap(1)").unwrap()), Val::Error);
    }

    #[test]
    fn ads_from_parsed_classads() {
        let flat = ClassAd::parse(r#"[ App = "worker"; N = 3; Requirements = member(App, TARGET.Apps) ]"#).unwrap();
        let job = EvalAd::from_classad(&flat).unwrap();
        let project = ad(r#"[ Apps = { "Worker", "other" }; Requirements = true ]"#);
        assert!(requirements_met(&Env::new(&job, &project, &NoFunctions)));
        assert_eq!(Val::Str("x".into()).as_rank(), 0.0);
        assert_eq!(Val::Bool(true).as_rank(), 1.0);
        assert!(Val::Int(2).is_true());
        assert!(!Val::Undefined.is_true());
    }
}
