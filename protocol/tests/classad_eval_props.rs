//! Property tests of ClassAd expressions and their evaluation: any text
//! parses or fails cleanly, what parses survives display -> parse, and
//! evaluation ends, never panics, is deterministic and keeps the
//! undefined/error rules.

use proptest::prelude::*;

use gahp_protocol::classad::expr::Expr;
use gahp_protocol::classad::{Env, EvalAd, NoFunctions, Val};

/// Expression text from the grammar, with names that exist in the test
/// ads (`A`..`D`, scoped or not), missing ones, and every operator.
fn expr_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        (-1.0e6f64..1.0e6).prop_map(|r| format!("{r:?}")),
        "[a-z ]{0,6}".prop_map(|s| format!("\"{s}\"")),
        prop::sample::select(vec![
            "true",
            "false",
            "undefined",
            "error",
            "A",
            "B",
            "C",
            "D",
            "MY.A",
            "TARGET.B",
            "other.C",
            "Missing",
            "L",
            "R",
            "R.x",
        ])
        .prop_map(str::to_string),
    ];
    leaf.prop_recursive(5, 48, 4, |inner| {
        prop_oneof![
            (
                inner.clone(),
                prop::sample::select(vec![
                    "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "=?=", "=!=", " is ", " isnt ", "&", "|", "^",
                ]),
                inner.clone()
            )
                .prop_map(|(a, op, b)| format!("({a}){op}({b})")),
            (prop::sample::select(vec!["-", "!", "+"]), inner.clone()).prop_map(|(op, a)| format!("{op}({a})")),
            (inner.clone(), inner.clone(), inner.clone()).prop_map(|(c, a, b)| format!("({c}) ? ({a}) : ({b})")),
            (inner.clone(), inner.clone(), inner.clone()).prop_map(|(c, a, b)| format!("ifThenElse({c}, {a}, {b})")),
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("{{{}}}", v.join(", "))),
            (inner.clone(), prop::collection::vec(inner.clone(), 0..3)).prop_map(|(x, v)| format!("member({x}, {{{}}})", v.join(", "))),
            (prop::sample::select(vec!["isUndefined", "isError", "size", "int", "real", "toLower", "strcat", "round"]), inner.clone())
                .prop_map(|(f, a)| format!("{f}({a})")),
            (inner.clone(), inner.clone()).prop_map(|(a, i)| format!("{{{a}}}[{i}]")),
            inner.prop_map(|a| format!("[x = {a}; y = 1]")),
        ]
    })
}

fn ads() -> (EvalAd, EvalAd) {
    let left = EvalAd::parse("[ A = 1; B = \"b\"; C = A + 1; L = { 1, \"x\" }; R = [ x = 2 ]; Loop = Loop ]").unwrap();
    let right = EvalAd::parse("[ A = 2.5; B = TARGET.A; C = undefined; D = other.Loop ]").unwrap();
    (left, right)
}

fn eval(text: &str) -> Val {
    let (left, right) = ads();
    let e = Expr::parse(text).unwrap_or_else(|err| panic!("{text}: {err}"));
    Env::new(&left, &right, &NoFunctions).eval(0, &e)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn display_parses_back(text in expr_text()) {
        let e = Expr::parse(&text).unwrap();
        let shown = e.to_string();
        let back = Expr::parse(&shown);
        prop_assert_eq!(back.as_ref(), Ok(&e), "{} -> {}", text, shown);
    }

    #[test]
    fn evaluation_is_total_and_deterministic(text in expr_text()) {
        let a = eval(&text);
        let b = eval(&text);
        // NaN is not equal to itself; `=?=` says whether two values are the same.
        let same = eval(&format!("({text}) =?= ({text})"));
        prop_assert!(same == Val::Bool(true) || matches!(a, Val::Real(r) if r.is_nan()), "{:?}", same);
        prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
        // The display of the tree means the same thing.
        let shown = Expr::parse(&text).unwrap().to_string();
        prop_assert_eq!(format!("{:?}", eval(&shown)), format!("{a:?}"));
    }

    #[test]
    fn strict_operators_propagate_undefined_and_error(text in expr_text(), op in prop::sample::select(vec!["+", "-", "*", "/", "%", "==", "!=", "<", ">=", "&", "|", "^"])) {
        let v = eval(&text);
        let with_error = eval(&format!("({text}) {op} error"));
        prop_assert_eq!(with_error, Val::Error);
        let with_undefined = eval(&format!("undefined {op} ({text})"));
        if v == Val::Error {
            prop_assert_eq!(with_undefined, Val::Error);
        } else {
            prop_assert_eq!(with_undefined, Val::Undefined);
        }
    }

    #[test]
    fn logic_is_three_valued(text in expr_text()) {
        let v = eval(&text);
        let and_false = eval(&format!("({text}) && false"));
        let or_true = eval(&format!("({text}) || true"));
        match v {
            Val::Error | Val::Str(_) | Val::List(_) | Val::Record(_) | Val::Ad(_) => {
                prop_assert_eq!(and_false, Val::Error);
                prop_assert_eq!(or_true, Val::Error);
            }
            _ => {
                prop_assert_eq!(and_false, Val::Bool(false));
                prop_assert_eq!(or_true, Val::Bool(true));
            }
        }
        prop_assert_eq!(eval(&format!("isUndefined({text})")), Val::Bool(v == Val::Undefined));
        prop_assert_eq!(eval(&format!("isError({text})")), Val::Bool(v == Val::Error));
        prop_assert_eq!(eval(&format!("false && ({text})")), Val::Bool(false));
    }

    #[test]
    fn integer_arithmetic_matches_rust(x in any::<i64>(), y in any::<i64>()) {
        prop_assert_eq!(eval(&format!("{x} + {y}")), Val::Int(x.wrapping_add(y)));
        prop_assert_eq!(eval(&format!("{x} - ({y})")), Val::Int(x.wrapping_sub(y)));
        prop_assert_eq!(eval(&format!("{x} * {y}")), Val::Int(x.wrapping_mul(y)));
        let div = if y == 0 { Val::Error } else { Val::Int(x.wrapping_div(y)) };
        prop_assert_eq!(eval(&format!("{x} / {y}")), div);
        prop_assert_eq!(eval(&format!("{x} < {y}")), Val::Bool(x < y));
        prop_assert_eq!(eval(&format!("{x} == {y}")), Val::Bool(x == y));
        prop_assert_eq!(eval(&format!("member({x}, {{{y}, {x}}})")), Val::Bool(true));
    }

    #[test]
    fn any_text_parses_or_fails_cleanly(text in "\\PC{0,40}") {
        if let Ok(e) = Expr::parse(&text) {
            let shown = e.to_string();
            prop_assert_eq!(Expr::parse(&shown), Ok(e));
        }
    }
}
