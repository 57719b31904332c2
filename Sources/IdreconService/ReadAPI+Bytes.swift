import Foundation
import HummingbirdCore
import IdreconDomain
import IdreconStore
import Logging
import NIOCore

/// `GET /v1/access/{asid}` answered from the connection's bytes, ahead of the HTTP decoder: the
/// decoder, the HTTP-types codec and the response encoder cost a sixth of the server's CPU per
/// request (`perf`: 53–72 against 45–52 µs per GET, `schemas/performance.md`). Only a narrow,
/// fully checked shape is taken here — `GET <target> HTTP/1.1`, CRLF-terminated header lines of
/// token names and visible values, none that frames a body or manages the connection, at most
/// one `Authorization`, the target one that `AccessOnEventLoop.plainAccess` takes — and it is
/// answered as `AccessOnEventLoop` answers it, byte for byte but the header names' case. The first
/// request that is anything else (or a read that fails), and every byte after it, goes to the
/// HTTP decoder for the rest of the connection, so answers leave in the order asked and the
/// decoder judges whatever this does not understand.
///
/// While it answers, this handler keeps the connection's idle timer (the decoder's side sees no
/// request): a connection is closed `idle` after its last answer (or its opening) whatever it
/// sends meanwhile, as `HTTPConnectionStateHandler` does for requests it sees. When it hands on,
/// it puts that handler in the pipeline, whose timer starts then.
final class AccessFromBytes: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let readers: EventLoopReaders
    private let tokens: BearerTokens?
    private let idle: Duration?
    private let logger: Logger
    private var reader: PinnedReader?
    private var handedOn = false
    /// Bytes of a request not yet complete (and any after it).
    private var pending: ByteBuffer?
    private var timer: Scheduled<Void>?
    private var date = HTTPDate()

    /// The longest request head taken here; a longer one goes to the decoder and its limits.
    static let maxHead = 8192

    init(readers: EventLoopReaders, tokens: BearerTokens?, idle: Duration?, logger: Logger) {
        (self.readers, self.tokens, self.idle, self.logger) = (readers, tokens, idle, logger)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        reader = readers.reader(for: context.eventLoop)
        if context.channel.isActive { restartTimer(context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) { timer?.cancel() }

    func channelActive(context: ChannelHandlerContext) {
        restartTimer(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !handedOn else { return context.fireChannelRead(data) }
        guard reader != nil else { return handOn(context, data: unwrapInboundIn(data)) }
        var incoming = unwrapInboundIn(data)
        if pending == nil { pending = incoming } else { pending!.writeBuffer(&incoming) }
        var answered = false
        while var buffer = pending, buffer.readableBytes > 0 {
            let length: Int
            switch Self.head(buffer) {
            case .complete(let count): length = count
            case .incomplete where buffer.readableBytes <= Self.maxHead: return finish(context, answered: answered)
            case .incomplete, .other:
                handOn(context)
                return finish(context, answered: answered)
            }
            let head = buffer.readSlice(length: length)!
            // A client that asks without reading the answers fills the outbound buffer: the rest of
            // its connection goes where reads wait for writes (Hummingbird's async channel).
            guard context.channel.isWritable, length <= Self.maxHead,
                  let (asid, at) = Self.plainAccess(head, tokens: tokens),
                  let read = try? reader?.access([asid], asOf: at)
            else {
                handOn(context)
                return finish(context, answered: answered)
            }
            pending = buffer.readableBytes > 0 ? buffer : nil
            let body = ReadAPI.accessBody(read, at: at)
            var response = context.channel.allocator.buffer(capacity: body.count + 160)
            response.writeString("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ")
            response.writeString(String(body.count))
            response.writeString("\r\ndate: \(date.text())\r\nserver: idrecon\r\n\r\n")
            response.writeBytes(body)
            context.write(wrapOutboundOut(response), promise: nil)
            answered = true
        }
        finish(context, answered: answered)
    }

    /// Sends what was answered, and counts the idle time from it while the connection is this handler's.
    private func finish(_ context: ChannelHandlerContext, answered: Bool) {
        guard answered else { return }
        context.flush()
        if !handedOn { restartTimer(context) }
    }

    /// Hands the rest of the connection to the HTTP decoder: the idle timer's handler first, then
    /// the bytes not answered here (`data`, or what is pending).
    private func handOn(_ context: ChannelHandlerContext, data: ByteBuffer? = nil) {
        handedOn = true
        timer?.cancel()
        timer = nil
        do {
            let before = try context.pipeline.syncOperations.handler(type: AccessOnEventLoop.self)
            try context.pipeline.syncOperations.addHandler(
                HTTPConnectionStateHandler(idleTimeout: idle, logger: logger), position: .before(before))
        } catch {
            // Without it the connection could outlive its idle time: close it instead.
            return context.close(promise: nil)
        }
        if let rest = data ?? pending {
            pending = nil
            context.fireChannelRead(wrapInboundOut(rest))
        }
    }

    private func restartTimer(_ context: ChannelHandlerContext) {
        timer?.cancel()
        guard let idle else { return }
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(idle)) { [weak self] in
            guard let self, !self.handedOn else { return }
            context.close(promise: nil)
        }
    }

    /// The request head at the start of a buffer: its length through the empty line, not complete
    /// yet, or not one taken here (a CR or LF that is not part of a CRLF, which the decoder judges).
    enum Head: Equatable {
        case complete(Int), incomplete, other
    }

    static func head(_ buffer: ByteBuffer) -> Head {
        buffer.readableBytesView.withContiguousStorageIfAvailable { bytes -> Head in
            var i = 0
            while i < bytes.count {
                if bytes[i] == 10 { return .other } // a LF without its CR
                if bytes[i] == 13 {
                    guard i + 1 < bytes.count else { return .incomplete }
                    guard bytes[i + 1] == 10 else { return .other }
                    if i + 3 < bytes.count, bytes[i + 2] == 13, bytes[i + 3] == 10 { return .complete(i + 4) }
                    i += 2
                } else {
                    i += 1
                }
            }
            return .incomplete
        } ?? .other
    }

    /// The ASID and time of a complete request head answered here, or nil to hand it on.
    static func plainAccess(_ head: ByteBuffer, tokens: BearerTokens?) -> (String, Int64?)? {
        head.readableBytesView.withContiguousStorageIfAvailable { bytes -> (String, Int64?)? in
            let lines = Self.lines(bytes)
            guard let requestLine = lines.first, lines.count >= 2, lines.last?.isEmpty == true else { return nil }
            let method = Array("GET ".utf8), version = Array(" HTTP/1.1".utf8)
            guard requestLine.count > method.count + version.count, requestLine.starts(with: method),
                  requestLine.reversed().starts(with: version.reversed())
            else { return nil }
            let target = requestLine[(requestLine.startIndex + method.count)..<(requestLine.endIndex - version.count)]
            guard target.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
            var authorization: String?
            for line in lines.dropFirst().dropLast() {
                guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex,
                      line[..<colon].allSatisfy(Self.isTokenByte),
                      line[(colon + 1)...].allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 < 0x7F) })
                else { return nil }
                let name = String(decoding: line[..<colon], as: UTF8.self).lowercased()
                guard !Self.refused.contains(name) else { return nil }
                if name == "authorization" {
                    guard authorization == nil else { return nil }
                    let value = line[(colon + 1)...].drop(while: { $0 == 0x20 || $0 == 0x09 })
                    authorization = String(decoding: value, as: UTF8.self)
                    while authorization?.last == " " || authorization?.last == "\t" { authorization?.removeLast() }
                }
            }
            return AccessOnEventLoop.plainAccess(
                path: String(decoding: target, as: UTF8.self), authorization: authorization, tokens: tokens)
        } ?? nil
    }

    /// The head's lines without their CRLF; a CR or LF anywhere else makes it no head taken here.
    private static func lines(_ bytes: UnsafeBufferPointer<UInt8>) -> [Slice<UnsafeBufferPointer<UInt8>>] {
        var lines: [Slice<UnsafeBufferPointer<UInt8>>] = []
        var start = 0, i = 0
        while i < bytes.count {
            if bytes[i] == 13 {
                guard i + 1 < bytes.count, bytes[i + 1] == 10 else { return [] }
                lines.append(bytes[start..<i])
                i += 2
                start = i
            } else if bytes[i] == 10 {
                return []
            } else {
                i += 1
            }
        }
        return start == bytes.count ? lines : []
    }

    /// RFC 9110's `tchar`.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"),
             UInt8(ascii: "A")...UInt8(ascii: "Z"):
            return true
        default:
            return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }

    /// Headers that frame a body, change the connection or ask for an interim answer: requests
    /// with any of them go to the decoder.
    private static let refused: Set<String> = [
        "content-length", "transfer-encoding", "connection", "upgrade", "expect", "te", "trailer", "keep-alive",
    ]
}
