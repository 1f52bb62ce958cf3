//! Request parsing the way the PHP scripts see it: `simplexml_load_string`
//! (well-formed XML or nothing), then children looked up by name, a missing
//! child read as "".

use quick_xml::events::Event;
use quick_xml::Reader;

/// An element: its name, its own text (direct text and CDATA children,
/// concatenated, entities decoded) and its child elements in order.
#[derive(Debug, Default, Clone)]
pub struct Element {
    pub name: String,
    pub text: String,
    pub children: Vec<Element>,
    /// Attributes, text, CDATA or child elements present: what makes PHP
    /// treat the object as true.
    pub non_empty: bool,
}

/// libxml's default nesting limit; deeper documents are refused (and a
/// deep tree could not be dropped without deep recursion).
const MAX_DEPTH: usize = 256;

/// The request is not well-formed XML (libxml would refuse it).
#[derive(Debug, thiserror::Error)]
#[error("can't parse request: {0}")]
pub struct ParseError(String);

impl Element {
    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// All children named `name`, in order.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// `(string)$el->name`: the first such child's text, or "".
    pub fn str(&self, name: &str) -> &str {
        self.child(name).map(|c| c.text.as_str()).unwrap_or("")
    }

    /// `(int)$el->name`.
    pub fn int(&self, name: &str) -> i64 {
        crate::php::to_int(self.str(name))
    }

    /// `(double)$el->name`.
    pub fn float(&self, name: &str) -> f64 {
        crate::php::to_float(self.str(name))
    }
}

fn err(e: impl std::fmt::Display) -> ParseError {
    ParseError(e.to_string())
}

/// Parses a whole document; exactly one root element, only whitespace,
/// comments and processing instructions around it.
pub fn parse(doc: &[u8]) -> Result<Element, ParseError> {
    let text = std::str::from_utf8(doc).map_err(err)?;
    let mut reader = Reader::from_str(text);
    reader.config_mut().check_end_names = true;
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    loop {
        let ev = reader.read_event().map_err(err)?;
        match ev {
            Event::Start(_) | Event::Empty(_) if root.is_some() && stack.is_empty() => {
                return Err(ParseError("extra content at the end of the document".into()));
            }
            Event::Start(e) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(ParseError("excessive depth in document".into()));
                }
                stack.push(new_element(&e)?)
            }
            Event::Empty(e) => {
                let el = new_element(&e)?;
                match stack.last_mut() {
                    Some(parent) => {
                        parent.non_empty = true;
                        parent.children.push(el);
                    }
                    None => root = Some(el),
                }
            }
            Event::End(_) => {
                let el = stack.pop().ok_or_else(|| ParseError("unexpected end tag".into()))?;
                match stack.last_mut() {
                    Some(parent) => {
                        parent.non_empty = true;
                        parent.children.push(el);
                    }
                    None => root = Some(el),
                }
            }
            Event::Text(t) => {
                let s = t.unescape().map_err(err)?;
                match stack.last_mut() {
                    Some(el) => {
                        el.non_empty = true;
                        el.text.push_str(&s);
                    }
                    None => {
                        if !s.trim_matches([' ', '\t', '\r', '\n']).is_empty() {
                            return Err(ParseError("text outside the root element".into()));
                        }
                    }
                }
            }
            Event::CData(c) => match stack.last_mut() {
                Some(el) => {
                    el.non_empty = true;
                    el.text.push_str(std::str::from_utf8(&c).map_err(err)?);
                }
                None => return Err(ParseError("CDATA outside the root element".into())),
            },
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) | Event::DocType(_) => {}
            Event::Eof => break,
        }
    }
    if !stack.is_empty() {
        return Err(ParseError("premature end of data".into()));
    }
    root.ok_or_else(|| ParseError("start tag expected".into()))
}

fn new_element(e: &quick_xml::events::BytesStart<'_>) -> Result<Element, ParseError> {
    let name = std::str::from_utf8(e.name().as_ref()).map_err(err)?.to_string();
    let mut non_empty = false;
    for a in e.attributes() {
        a.map_err(err)?;
        non_empty = true;
    }
    Ok(Element { name, non_empty, ..Default::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_looks_up() {
        let el = parse(b"<a>\n<b>x &amp; y</b><b>2</b><c><![CDATA[<z>]]></c></a>").unwrap();
        assert_eq!(el.name, "a");
        assert_eq!(el.str("b"), "x & y");
        assert_eq!(el.all("b").count(), 2);
        assert_eq!(el.str("c"), "<z>");
        assert_eq!(el.str("missing"), "");
        assert!(el.non_empty);
    }

    #[test]
    fn rejects_what_libxml_rejects() {
        assert!(parse(b"this is not xml").is_err());
        assert!(parse(b"").is_err());
        assert!(parse(b"<a><b></a>").is_err());
        assert!(parse(b"<a></a><b/>").is_err());
        assert!(parse(b"<a>&nbsp;</a>").is_err());
        assert!(parse(b"<a>").is_err());
        let deep = "<a>".repeat(300) + &"</a>".repeat(300);
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn empty_roots() {
        assert!(!parse(b"<ping/>").unwrap().non_empty);
        assert!(!parse(b"<ping></ping>").unwrap().non_empty);
        assert!(parse(b"<ping> </ping>").unwrap().non_empty);
    }
}
