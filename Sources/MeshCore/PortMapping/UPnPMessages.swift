import MeshCrypto

// UPnP IGD is done here in Swift, not through libminiupnpc: every answer of the gateway (SSDP,
// the description's XML, SOAP) is untrusted, and here it is read by a bounded, memory-safe
// reader that the fuzzer runs, where the library's C parsers have had memory-safety CVEs; its
// blocking calls would also need threads and could not be cut short at stop. What a client
// needs is small: one search, one description, three SOAP actions.

/// SSDP discovery (UPnP Device Architecture §1.3): the search and the gateway's answer.
package enum SSDPMessage {
    package static let multicastGroup = PeerAddress(host: .ipv4(0xEFFF_FFFA), port: 1900)  // 239.255.255.250
    package static let gatewayDevices = [
        "urn:schemas-upnp-org:device:InternetGatewayDevice:1",
        "urn:schemas-upnp-org:device:InternetGatewayDevice:2",
    ]

    package static func search(_ target: String) -> [UInt8] {
        Array(
            ("M-SEARCH * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nMAN: \"ssdp:discover\"\r\nMX: 2\r\n"
                + "ST: \(target)\r\n\r\n").utf8)
    }

    /// The description's location in an answer to our search, when it names a gateway device;
    /// nil for anything else (a NOTIFY, another device, no usable LOCATION).
    package static func location(inAnswer bytes: [UInt8]) -> HTTPLocation? {
        guard bytes.count <= 2048, let text = String(validating: bytes, as: UTF8.self) else { return nil }
        let lines = text.split(separator: "\r\n", maxSplits: 64, omittingEmptySubsequences: false)
        guard let status = lines.first, status.hasPrefix("HTTP/1.1 200") || status.hasPrefix("HTTP/1.0 200") else {
            return nil
        }
        var location: HTTPLocation?
        var isGateway = false
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].trimmingSpaces.lowercased()
            let value = String(line[line.index(after: colon)...].trimmingSpaces)
            if name == "location" { location = HTTPLocation(value) }
            if name == "st" { isGateway = gatewayDevices.contains(value) }
        }
        return isGateway ? location : nil
    }
}

/// An `http://A.B.C.D:PORT/PATH` URL: only numeric IPv4 hosts (a gateway has no name we could
/// check), only http.
package struct HTTPLocation: Equatable, Sendable, CustomStringConvertible {
    package var host: UInt32
    package var port: UInt16
    package var path: String

    package init(host: UInt32, port: UInt16, path: String) {
        (self.host, self.port, self.path) = (host, port, path)
    }

    package init?(_ text: String) {
        guard text.utf8.count <= 1024, text.lowercased().hasPrefix("http://") else { return nil }
        let rest = text.dropFirst(7)
        let authority = rest.prefix { $0 != "/" }
        let path = rest.dropFirst(authority.count)
        guard let (hostText, port) = PeerAddress.split(String(authority)), port != 0,
            case let .ipv4(host)? = PeerAddress.parseHost(hostText)
        else { return nil }
        self.init(host: host, port: port, path: path.isEmpty ? "/" : String(path))
        guard self.path.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
    }

    /// `reference` (absolute, or a path) against this URL; nil for another host or no http.
    package func resolving(_ reference: String) -> HTTPLocation? {
        if reference.lowercased().hasPrefix("http://") { return HTTPLocation(reference) }
        guard reference.utf8.count <= 1024, reference.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        if reference.hasPrefix("/") { return HTTPLocation(host: host, port: port, path: reference) }
        let directory = path.lastIndex(of: "/").map { String(path[...$0]) } ?? "/"
        return HTTPLocation(host: host, port: port, path: directory + reference)
    }

    package var description: String { "http://\(PeerAddress(host: .ipv4(host), port: port))\(path)" }
}

/// The gateway's WAN connection service, from its device description.
package struct UPnPService: Equatable, Sendable {
    package var serviceType: String
    package var control: HTTPLocation

    /// IGD:2's WANIPConnection:2 has AddAnyPortMapping (the gateway picks a free port).
    package var hasAddAny: Bool { serviceType == "urn:schemas-upnp-org:service:WANIPConnection:2" }

    static let wanServices = [
        "urn:schemas-upnp-org:service:WANIPConnection:2", "urn:schemas-upnp-org:service:WANIPConnection:1",
        "urn:schemas-upnp-org:service:WANPPPConnection:1",
    ]

    /// The best WAN connection service in a description fetched from `location` (IPv4
    /// connection 2, then 1, then PPP); nil when it names none.
    package static func find(inDescription bytes: [UInt8], location: HTTPLocation) -> UPnPService? {
        guard bytes.count <= 64 * 1024 else { return nil }
        var base = location
        var found: [(type: String, control: String)] = []
        var serviceType: String?, control: String?
        for item in XMLLeaves(bytes) {
            switch item {
            case let .leaf(name, text, parent):
                if name == "URLBase", let url = HTTPLocation(text) { base = url }
                if parent == "service", name == "serviceType" { serviceType = text }
                if parent == "service", name == "controlURL" { control = text }
            case let .close(name):
                if name == "service" {
                    if let serviceType, let control, found.count < 64 { found.append((serviceType, control)) }
                    (serviceType, control) = (nil, nil)
                }
            }
        }
        for wanted in wanServices {
            guard let match = found.first(where: { $0.type == wanted }), let url = base.resolving(match.control) else {
                continue
            }
            return UPnPService(serviceType: wanted, control: url)
        }
        return nil
    }
}

/// SOAP requests to the WAN connection service, and the reading of their answers.
package enum UPnPSOAP {
    package static let maxAnswer = 16 * 1024

    /// The request body of `action` with `arguments` (in order).
    package static func body(_ action: String, service: String, arguments: [(String, String)]) -> [UInt8] {
        let inner = arguments.map { "<\($0.0)>\(escaped($0.1))</\($0.0)>" }.joined()
        return Array(
            ("<?xml version=\"1.0\"?>\r\n<s:Envelope xmlns:s=\"http://schemas.xmlsoap.org/soap/envelope/\" "
                + "s:encodingStyle=\"http://schemas.xmlsoap.org/soap/encoding/\"><s:Body>"
                + "<u:\(action) xmlns:u=\"\(service)\">\(inner)</u:\(action)></s:Body></s:Envelope>\r\n").utf8)
    }

    package static func soapAction(_ action: String, service: String) -> String { "\"\(service)#\(action)\"" }

    package enum Answer: Equatable, Sendable {
        /// The action's out arguments by name.
        case success([String: String])
        /// A UPnP error (`errorCode`, `errorDescription`), or an HTTP status with none.
        case fault(code: Int, description: String)
    }

    /// Reads the answer to a SOAP request: HTTP 200 with the action's arguments, else a fault.
    package static func answer(status: Int, body: [UInt8]) -> Answer {
        guard body.count <= maxAnswer else { return .fault(code: -1, description: "answer over 16 KiB") }
        var values: [String: String] = [:]
        for case let .leaf(name, text, _) in XMLLeaves(body) where values.count < 32 {
            values[name] = text
        }
        if status == 200 { return .success(values) }
        let code = values["errorCode"].flatMap { Int($0) } ?? -status
        return .fault(code: code, description: values["errorDescription"] ?? "HTTP status \(status)")
    }

    static func escaped(_ text: String) -> String {
        var result = ""
        for character in text {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            default: result.append(character)
            }
        }
        return result
    }
}

/// A minimal reader of the XML a gateway sends: the text of each element holding text only
/// (with its parent's name), and each element's end; names without their namespace prefix.
/// Not a validating parser: it reads what descriptions and SOAP answers hold, bounded (at most
/// 4,096 items, 32 levels, 1 KiB of text each) whatever the input.
struct XMLLeaves: Sequence {
    enum Item: Equatable {
        case leaf(name: String, text: String, parent: String?)
        case close(String)
    }

    let items: [Item]

    init(_ bytes: [UInt8]) {
        var items: [Item] = []
        var stack: [String] = []
        var text: [UInt8] = []
        var hadChild = false
        var index = 0
        while index < bytes.count, items.count < 4096 {
            let byte = bytes[index]
            guard byte == UInt8(ascii: "<") else {
                if text.count < 1024 { text.append(byte) }
                index += 1
                continue
            }
            guard let end = bytes[index...].firstIndex(of: UInt8(ascii: ">")) else { break }
            let tag = bytes[(index + 1)..<end]
            index = end + 1
            guard let first = tag.first else { continue }
            if first == UInt8(ascii: "?") || first == UInt8(ascii: "!") { continue }  // declaration, comment
            if first == UInt8(ascii: "/") {
                let name = Self.localName(tag.dropFirst())
                guard let open = stack.last, open == name else { text = []; continue }
                stack.removeLast()
                if !hadChild {
                    let value = Self.decoded(text)
                    items.append(.leaf(name: name, text: value, parent: stack.last))
                }
                items.append(.close(name))
                hadChild = true
                text = []
                continue
            }
            let selfClosing = tag.last == UInt8(ascii: "/")
            let name = Self.localName(selfClosing ? tag.dropLast() : tag)
            text = []
            if selfClosing {
                items.append(.leaf(name: name, text: "", parent: stack.last))
                items.append(.close(name))
                hadChild = true
            } else {
                guard stack.count < 32 else { break }
                stack.append(name)
                hadChild = false
            }
        }
        self.items = items
    }

    func makeIterator() -> IndexingIterator<[Item]> { items.makeIterator() }

    /// `s:Envelope xmlns:s="…"` → `Envelope`.
    private static func localName(_ tag: ArraySlice<UInt8>) -> String {
        let name = tag.prefix {
            $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") && $0 != UInt8(ascii: "\r")
                && $0 != UInt8(ascii: "\n") && $0 != UInt8(ascii: "/")
        }.prefix(128)
        let local = name.lastIndex(of: UInt8(ascii: ":")).map { name[(name.index(after: $0))...] } ?? name
        return String(decoding: local, as: UTF8.self)
    }

    private static func decoded(_ text: [UInt8]) -> String {
        var value = String(decoding: text, as: UTF8.self).trimmingSpaces
        guard value.contains("&") else { return String(value) }
        for (entity, character) in [("&lt;", "<"), ("&gt;", ">"), ("&quot;", "\""), ("&apos;", "'"), ("&amp;", "&")] {
            value = Substring(value.replacing(entity, with: character))
        }
        return String(value)
    }
}

extension StringProtocol {
    /// Without the spaces, tabs and line ends around it.
    var trimmingSpaces: Substring {
        let blank: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" }
        let scalars = Substring(self)
        guard let start = scalars.firstIndex(where: { !blank($0) }), let end = scalars.lastIndex(where: { !blank($0) })
        else {
            return ""
        }
        return scalars[start...end]
    }
}
