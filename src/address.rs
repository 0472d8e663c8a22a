//! The gRPC address a command is given (`query --grpc-addr`, `loadgen
//! --target`), taken as `HOST:PORT` or as a URL alike.

/// `address` as a URL: as it is when it names a scheme, else
/// `scheme://address`.
pub fn url(address: &str, scheme: &str) -> String {
    match address.contains("://") {
        true => address.to_owned(),
        false => format!("{scheme}://{address}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_address_keeps_its_scheme_or_gets_the_one_given() {
        assert_eq!(super::url("127.0.0.1:1", "http"), "http://127.0.0.1:1");
        assert_eq!(super::url("h:1", "https"), "https://h:1");
        assert_eq!(super::url("http://h:1", "https"), "http://h:1");
    }
}
