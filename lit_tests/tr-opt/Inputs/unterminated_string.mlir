// An unterminated string literal: xDSL 0.74's lexer regex backtracks 2^(line length) times.
// tr-opt's lexer fails in linear time.
%0 = "test.op"() {a = "this string literal is not closed before the end of this line, so the regex fails} : () -> i32
