#include "textflag.h"

// func Int80(nr, a1, a2, a3 uintptr) (r uintptr)
TEXT ·Int80(SB), NOSPLIT, $0-40
	MOVQ nr+0(FP), AX
	MOVQ a1+8(FP), BX
	MOVQ a2+16(FP), CX
	MOVQ a3+24(FP), DX
	INT  $0x80
	MOVQ AX, r+32(FP)
	RET
