// The dataset shapes that are conversations in other spellings, turned into a `messages` list so that they get
// the masks of `messages` lines (assistant turns scored, the rest context):
//   ShareGPT: {"conversations": [{"from": "human"|"gpt"|"system"|..., "value": "..."}, ...]}
//   Alpaca:   {"instruction": "...", "input": "..." (optional), "output": "..."}: the instruction and input are the
//             user's message (joined by a blank line when the input is not empty), the output the assistant's.
#pragma once

#include "moetune/data/example.h"

namespace moetune::data {

Json sharegpt_messages(const Json& line);
Json alpaca_messages(const Json& line);

}  // namespace moetune::data
