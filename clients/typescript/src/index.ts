export * from "./frames.js";
export { ProtocolError, FrameDecoder, decodeAll, decodePayload, encodeData, encodeFrame, encodeValue, typeName, type Decoded } from "./codec.js";
