export * from "./frames.js";
export {
  ProtocolError, FrameDecoder, decodeAll, decodePayload, encodeData, encodeFrame, encodeValue, typeName, type Decoded,
} from "./codec.js";
export {
  CLIENT_NAME, Client, ClientError, ConnectionRefused, InstanceMismatch, NotASocket, ProtocolViolation, RemoteError, SessionGone,
  SessionNotFound, RequestFailed, ShellperDead, Timeout, UntrustedSocket, checkSocketPath, dirRefusal, shellperAlive, type ConnectOptions, type RequestInit, type SpawnOptions,
} from "./client.js";
export { DEFAULT_BACKOFF, ResumingClient, type Backoff, type Reconnected, type ResumeItem, type ResumingOptions } from "./resuming.js";
