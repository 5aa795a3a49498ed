// Every user mistake is an `error:` with exit 1 (`not` fails on any other code, and on
// the internal-error exit 70), never a traceback.

// Option errors name the option as written, with what it takes.
// RUN: not partita-opt %s -p 'partition-eager{bind_constants=1}' 2>&1 | filecheck %s --check-prefix=VALUE
// VALUE: error: option 'bind-constants' of pass 'partition-eager' takes a bool, not '1'
// RUN: not partita-opt %s -p 'partition-eager{bind-constants=yes}' 2>&1 | filecheck %s --check-prefix=VALUE2
// VALUE2: error: option 'bind-constants' of pass 'partition-eager' takes a bool, not 'yes'
// RUN: not partita-opt %s -p 'partition-eager{no-such=1}' 2>&1 | filecheck %s --check-prefix=UNKNOWN
// UNKNOWN: error: pass 'partition-eager' has no option 'no-such' (its options: backends, bind-constants, merge, sm)
// RUN: not partita-opt %s -p 'no-such-pass' 2>&1 | filecheck %s --check-prefix=PASS
// PASS: error: unknown pass 'no-such-pass' (see partita-opt --list-passes)
// RUN: not partita-opt %s -t 'cutlass-cpp{sm=abc}' 2>&1 | filecheck %s --check-prefix=SM
// SM: error: option 'sm' of target 'cutlass-cpp' takes a compute capability (80, 90, 90a, ...), not 'abc'
// RUN: not partita-opt %s -t 'cuda-c{arch=sm_1}' 2>&1 | filecheck %s --check-prefix=ARCH
// ARCH: error: target 'cuda-c' has no option 'arch' (its options: none)

// The input's kind comes from its content: models that are not IR are refused with
// what to do instead; any text file is read as IR whatever its extension.
// RUN: not partita-opt %S/../../../examples/encoder.onnx 2>&1 | filecheck %s --check-prefix=ONNX
// ONNX: error: '{{.*}}encoder.onnx' is an ONNX model, not textual IR as partita-opt takes: import it with 'partita-import
// RUN: python -c "import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read())" %S/../../../examples/encoder.onnx > %t.model
// RUN: not partita-opt %t.model 2>&1 | filecheck %s --check-prefix=ONNX-NOEXT
// ONNX-NOEXT: error: '{{.*}}.model' is an ONNX model, not textual IR as partita-opt takes
// RUN: python -c "import sys; sys.stdout.buffer.write(b'PARTITA-MODEL\x00\x01\x00' + bytes(64))" > %t.partita
// RUN: not partita-opt %t.partita 2>&1 | filecheck %s --check-prefix=COMPILED
// COMPILED: error: '{{.*}}.partita' is a compiled Partita model, not textual IR as partita-opt takes: run it with 'partita-run
// RUN: python -c "import sys; sys.stdout.buffer.write(bytes([0xff, 0x00, 0x13, 0x37]) * 8)" > %t.bin
// RUN: not partita-opt %t.bin 2>&1 | filecheck %s --check-prefix=BINARY
// BINARY: error: '{{.*}}.bin' is a binary file of unknown format, not textual IR as partita-opt takes
// RUN: echo "func.func @f() {" > %t.txt
// RUN: not partita-opt %t.txt 2>&1 | filecheck %s --check-prefix=TEXT
// TEXT: {{.*}}.txt:{{[0-9]+}}:{{[0-9]+}}: error:
// RUN: not partita-opt %t.missing 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING: error: cannot read '{{.*}}.missing': No such file or directory

builtin.module {}
