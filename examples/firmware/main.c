/* main.c -- the firmware: classify the input compiled into the image with the model aot built (with
 * --name model) and print on the console "class N", then "scores" and each score with 6 decimals.
 * No malloc, no C library: the model's scratch memory is the static array below, of the size its
 * static memory plan fixed at compile time.
 */
#include <stdint.h>

#include "board.h"
#include "model.h"
#include INPUT_HEADER /* example_inputs and EXAMPLE_SCORES, from make_input.py */

static uint8_t workspace[MODEL_WORKSPACE_SIZE] __attribute__((aligned(MODEL_WORKSPACE_ALIGN)));
static float scores[EXAMPLE_SCORES];

static void put_str(const char *s)
{
    while (*s)
        board_putc(*s++);
}

static void put_uint(uint32_t v)
{
    char digits[10];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v);
    while (n)
        board_putc(digits[--n]);
}

static void put_float(float f)
{
    uint32_t whole, millionths, d;
    if (f != f) {
        put_str("nan");
        return;
    }
    if (f < 0.0f) {
        board_putc('-');
        f = -f;
    }
    if (f >= 4.0e9f) {
        put_str("inf");
        return;
    }
    whole = (uint32_t)f;
    millionths = (uint32_t)((f - (float)whole) * 1.0e6f + 0.5f);
    if (millionths >= 1000000u) {
        whole++;
        millionths -= 1000000u;
    }
    put_uint(whole);
    board_putc('.');
    for (d = 100000u; d; d /= 10u)
        board_putc((char)('0' + millionths / d % 10u));
}

int main(void)
{
    model_outputs outputs = {scores};
    int32_t status;
    uint32_t i, best = 0;

    board_init();
    status = model_run(&example_inputs, &outputs, workspace);
    if (status != MODEL_OK) {
        put_str("model_run failed: ");
        put_uint((uint32_t)-status);
        put_str("\n");
        return 1;
    }
    for (i = 1; i < EXAMPLE_SCORES; i++)
        if (scores[i] > scores[best])
            best = i;
    put_str("class ");
    put_uint(best);
    put_str("\nscores");
    for (i = 0; i < EXAMPLE_SCORES; i++) {
        board_putc(' ');
        put_float(scores[i]);
    }
    put_str("\n");
    return 0;
}
