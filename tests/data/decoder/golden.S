// Hand-written program for the golden outputs of every ptdecode sub-command. Assembly (not C)
// so addresses and bytes do not depend on the compiler version; linked at 0x401000.
        .text
        .globl  _start
        .type   _start, @function
_start:
        mov     $5, %edi
        call    main
        ret
        .size   _start, .-_start

        .globl  main
        .type   main, @function
main:
        push    %rbx
        mov     %edi, %ebx
1:      mov     %ebx, %edi
        call    _ZN4demo4stepEi
        dec     %ebx
        jnz     1b
        mov     $3, %edi
        call    _ZN4demo4tailEi
        pop     %rbx
        ret
        .size   main, .-main

        // demo::step(int)
        .globl  _ZN4demo4stepEi
        .type   _ZN4demo4stepEi, @function
_ZN4demo4stepEi:
        test    $1, %edi
        jz      2f
        call    _ZN4demo4leafEv
2:      lea     1(%rdi), %eax
        ret
        .size   _ZN4demo4stepEi, .-_ZN4demo4stepEi

        // demo::leaf()
        .globl  _ZN4demo4leafEv
        .type   _ZN4demo4leafEv, @function
_ZN4demo4leafEv:
        nop
        xor     %eax, %eax
        ret
        .size   _ZN4demo4leafEv, .-_ZN4demo4leafEv

        // demo::tail(int): tail-jumps into demo::leaf(), so one block spans two functions.
        .globl  _ZN4demo4tailEi
        .type   _ZN4demo4tailEi, @function
_ZN4demo4tailEi:
        add     $1, %edi
        jmp     _ZN4demo4leafEv
        .size   _ZN4demo4tailEi, .-_ZN4demo4tailEi

        .section .note.GNU-stack,"",@progbits
