// Loads one GGUF file in real llama.cpp (node-llama-cpp's prebuilt CPU binaries, no GPU probing, no build, no
// download) and prints, as one JSON object on stdout:
//   - for each text: llama.cpp's tokens without specials and special-token text left as text (`plain`), with
//     special-token text parsed (`parsed`), the BOS/EOS llama.cpp adds around a prompt (`bos`, `eos`, as
//     llama_tokenize with add_special does, `add_bos`, `add_eos`), and both detokenized back (`detokenized`,
//     `detokenized_parsed` with special tokens rendered);
//   - for the token sequence given, llama.cpp's raw next-token logits over the whole vocabulary after every
//     position (`logits[i][token]`), from one evaluation of the sequence, no sampling applied.
//
//   node check.mjs REQUEST.json
// REQUEST.json: {"model": "file.gguf", "texts": ["..."], "evaluate": [token ids], "threads": 2, "kv_cache": "F32"}
// ("kv_cache": the type of llama.cpp's key/value cache, F16 by default as in llama.cpp's own tools; "log_level":
// "debug" streams llama.cpp's log to stderr, for a file that fails to load)
// A file llama.cpp refuses makes the script exit 2 with {"error": "..."} on stdout.

import {readFileSync} from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const request = JSON.parse(readFileSync(process.argv[2], "utf8"));
const logs = [];

const llama = await getLlama({
    gpu: false, // CPU only: no CUDA/Vulkan/Metal probing
    build: "never",
    usePrebuiltBinaries: true,
    skipDownload: true,
    progressLogs: false,
    logLevel: request.log_level ?? LlamaLogLevel.warn,
    logger(level, message) {
        logs.push(`${level}: ${message.trim()}`);
        if (request.log_level != null)
            process.stderr.write(`${level}: ${message.trim()}\n`);
    },
});

let model;
try {
    model = await llama.loadModel({modelPath: request.model, gpuLayers: 0, useMmap: false, checkTensors: true});
} catch (error) {
    process.stdout.write(JSON.stringify({error: String(error?.message ?? error), logs}) + "\n");
    process.exit(2);
}

const tokens = model.tokens;
const texts = (request.texts ?? []).map((text) => {
    const plain = Array.from(model.tokenize(text, false));
    const parsed = Array.from(model.tokenize(text, true));
    return {
        text,
        plain,
        parsed,
        detokenized: model.detokenize(plain, false),
        detokenized_parsed: model.detokenize(parsed, true),
    };
});

let logits = null;
const sequenceTokens = request.evaluate ?? [];
if (sequenceTokens.length > 0) {
    const length = sequenceTokens.length;
    const context = await model.createContext({
        contextSize: Math.max(length, 32),
        batchSize: Math.max(length, 32),
        threads: request.threads ?? 2,
        flashAttention: false,
        // llama.cpp keeps keys and values in f16 unless told otherwise; "F32" measures the file alone
        experimentalKvCacheKeyType: request.kv_cache ?? "F16",
        experimentalKvCacheValueType: request.kv_cache ?? "F16",
        sequences: 1,
    });
    const sequence = context.getSequence();
    const input = sequenceTokens.map((token) => [token, {generateNext: {logits: true}}]);
    const output = await sequence.controlledEvaluate(input);
    logits = output.map((item, index) => {
        const map = item?.next?.logits;
        if (map == null)
            throw new Error(`llama.cpp returned no logits after position ${index}`);
        const row = new Array(map.size).fill(null);
        for (const [token, value] of map) {
            if (token >= row.length)
                throw new Error(`token id ${token} outside the ${row.length} logits returned`);
            row[token] = value;
        }
        if (row.some((value) => value == null))
            throw new Error(`logits after position ${index} do not cover the vocabulary`);
        return row;
    });
    await context.dispose();
}

process.stdout.write(JSON.stringify({
    llama_cpp: llama.llamaCppRelease,
    build: llama.buildType,
    gpu: llama.gpu,
    bos: tokens.bos ?? null,
    eos: tokens.eos ?? null,
    add_bos: model.tokens.shouldPrependBosToken,
    add_eos: model.tokens.shouldAppendEosToken ?? null,
    texts,
    logits,
    logs: logs.slice(0, 40),
}) + "\n");
await model.dispose();
await llama.dispose();
