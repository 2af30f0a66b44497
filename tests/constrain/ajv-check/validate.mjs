// Validates the texts sampled from kylin's JSON-schema grammars (schema_samples_test.cpp, one
// {"schema", "samples"} JSON line per schema) with ajv's JSON Schema 2020-12 validator (draft 07
// where the schema's $schema says so) and ajv-formats: every sample must be valid JSON that its
// schema accepts.
import { readFileSync } from "node:fs";
import Ajv07 from "ajv";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const file = process.argv[2];
const lines = readFileSync(file, "utf8").split("\n").filter((l) => l.length > 0);
const options = { strict: true, strictTuples: false, allErrors: true };  // open tuples are meant
const ajv2020 = addFormats(new Ajv2020(options));
const ajv07 = addFormats(new Ajv07(options));

let checked = 0;
let failed = 0;
for (const line of lines) {
  const { schema, samples } = JSON.parse(line);
  const ajv = String(schema.$schema ?? "").includes("draft-07") ? ajv07 : ajv2020;
  const validate = ajv.compile(schema);
  for (const text of samples) {
    checked++;
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      failed++;
      console.error(`not JSON: ${text}\n  schema: ${JSON.stringify(schema)}\n  ${e.message}`);
      continue;
    }
    if (!validate(value)) {
      failed++;
      console.error(`invalid: ${text}\n  schema: ${JSON.stringify(schema)}\n  ${ajv.errorsText(validate.errors)}`);
    }
  }
}
if (lines.length === 0 || checked === 0) {
  console.error(`no samples in ${file}`);
  process.exit(1);
}
console.log(`${checked} samples of ${lines.length} schemas checked, ${failed} invalid`);
process.exit(failed === 0 ? 0 : 1);
