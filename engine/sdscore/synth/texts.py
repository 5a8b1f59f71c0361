"""Sentence material besides dialogues: speaker-turn sentences, reference passages, judge tasks."""

from __future__ import annotations

from dataclasses import dataclass

#: Read by every voice once; the voice-similarity proxy is computed on it.
CALIBRATION_SENTENCE = (
    "The quick brown fox jumps over the lazy dog, while five wizards box joyfully "
    "and a large pale moon rises slowly above the quiet hills."
)

#: Single turns of one speaker (SpeakerSleuth-style target turns); each is a few seconds long.
TURN_SENTENCES: tuple[str, ...] = (
    "I think we should leave a little earlier tomorrow morning.",
    "The library closes at eight on weekdays and at five on Saturdays.",
    "Honestly, I didn't expect the concert to be that loud.",
    "Could you send me the address of the restaurant again?",
    "We planted tomatoes and basil in the garden last spring.",
    "My brother is moving to a new apartment next month.",
    "The train was delayed because of a signal problem near the station.",
    "I usually go for a short walk after dinner.",
    "That sounds like a great idea, let's do it on Friday.",
    "The museum has a new exhibition about ancient maps.",
    "I left my umbrella at the office again.",
    "She has been learning to play the piano for three years.",
    "Please remember to switch off the lights when you leave.",
    "The bakery on the corner makes the best bread in town.",
    "We watched the sunset from the top of the hill.",
    "I'm not sure the meeting room is free this afternoon.",
    "The children were building a sandcastle on the beach.",
    "He always drinks two cups of tea before starting work.",
    "Our flight lands just after midnight, so don't wait up.",
    "The new bridge will open to traffic next summer.",
    "I finally finished reading that long novel you lent me.",
    "It rained all morning, but the afternoon was lovely.",
    "The recipe needs two onions and a handful of fresh herbs.",
    "Let me check my calendar and get back to you.",
    "The bus stop was moved to the other side of the street.",
    "We need to buy milk, eggs and some fruit.",
    "My phone battery is almost empty, I'll call you later.",
    "The football season starts again in August.",
    "There's a small park right behind our building.",
    "I've never seen so many stars in the sky.",
    "The doctor said I should rest for a few more days.",
    "They painted the kitchen a bright shade of yellow.",
    "Can you believe how fast this year has gone by?",
    "The package should arrive sometime on Thursday.",
    "We're planning a picnic if the weather stays dry.",
    "I prefer mountains to beaches for a holiday.",
    "The old clock in the hall stopped working last week.",
    "He fixed the bicycle with a borrowed set of tools.",
    "This coffee is much stronger than I expected.",
    "The class was cancelled because the teacher was ill.",
    "Turn left at the pharmacy and walk straight for two blocks.",
    "I'm going to try cooking something new tonight.",
    "The neighbours' dog barks every time the postman comes.",
    "We spent the whole afternoon cleaning the garage.",
    "Her presentation was clear, short and very convincing.",
    "I can't find the charger for my laptop anywhere.",
    "The view from the train window was absolutely beautiful.",
    "Let's meet at the entrance of the shopping centre.",
)

#: Longer passages (well over three seconds when spoken) used as speaker reference clips.
REFERENCE_PASSAGES: tuple[str, ...] = (
    ("When the sunlight strikes raindrops in the air, they act as a prism and form a rainbow, "
     "a division of white light into many beautiful colours."),
    ("Every morning I take the same route to work, past the river, through the small square "
     "with the fountain, and up the hill to the old brick building."),
    ("The town council has agreed to build a new playground, a cycle path along the canal, "
     "and a community garden where residents can grow their own vegetables."),
    ("On our last holiday we hired a small boat, explored the islands along the coast, "
     "and ate fresh fish in a different harbour every evening."),
    ("If you want to learn a musical instrument, practise a little every day, listen carefully "
     "to good recordings, and be patient with yourself when progress feels slow."),
    ("The history of the city can be read in its streets, from the narrow medieval lanes near "
     "the cathedral to the wide avenues built at the end of the nineteenth century."),
)


@dataclass(frozen=True)
class JudgeTask:
    """A spoken instruction with a style demand, a correct answer and a wrong answer."""

    task_id: str
    instruction: str
    style: str  # the paralinguistic demand: slow | fast | high | low
    correct: str
    wrong: str


JUDGE_TASKS: tuple[JudgeTask, ...] = (
    JudgeTask("capital-australia", "Slowly and calmly, tell me what the capital of Australia is.",
              "slow", "The capital of Australia is Canberra.", "The capital of Australia is Sydney."),
    JudgeTask("water-boil", "Quickly, in one breath, tell me the boiling point of water at sea level.",
              "fast", "Water boils at one hundred degrees Celsius at sea level.",
              "Water boils at fifty degrees Celsius at sea level."),
    JudgeTask("count-five", "In a high, cheerful voice, count from one to five.",
              "high", "One, two, three, four, five!", "Two, four, six, eight, ten!"),
    JudgeTask("planets", "In a deep, low voice, name the planet closest to the sun.",
              "low", "The planet closest to the sun is Mercury.",
              "The planet closest to the sun is Jupiter."),
    JudgeTask("spider-legs", "Speak slowly and tell me how many legs a spider has.",
              "slow", "A spider has eight legs.", "A spider has six legs."),
    JudgeTask("days-week", "As fast as you can, list the days of the week.",
              "fast", "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday.",
              "January, February, March, April, May, June, July."),
    JudgeTask("greeting", "Say good morning to me in a bright, high-pitched voice.",
              "high", "Good morning! I hope you have a wonderful day.",
              "Good night, sleep well and see you tomorrow."),
    JudgeTask("story-opening", "In a low, dramatic voice, give me the opening line of a ghost story.",
              "low", "It was a cold and silent night when the old house began to whisper.",
              "Today the sun is shining and everyone is having a lovely picnic."),
    JudgeTask("colours-flag", "Slowly, name the three colours of the French flag.",
              "slow", "The French flag is blue, white and red.",
              "The French flag is green, white and orange."),
    JudgeTask("alphabet", "Recite the first five letters of the alphabet quickly.",
              "fast", "A, B, C, D, E.", "X, Y, Z, W, V."),
    JudgeTask("cat-sound", "In a high, playful voice, tell me what sound a cat makes.",
              "high", "A cat says meow.", "A cat says woof."),
    JudgeTask("ocean", "In a deep voice, tell me the largest ocean on Earth.",
              "low", "The largest ocean on Earth is the Pacific Ocean.",
              "The largest ocean on Earth is the Indian Ocean."),
    JudgeTask("recipe-tea", "Calmly and slowly, explain how to make a cup of tea.",
              "slow", "Boil water, pour it over a tea bag, wait three minutes, then remove the bag.",
              "Put the tea bag in cold milk and freeze it overnight."),
    JudgeTask("math-add", "Answer quickly: what is seven plus eight?",
              "fast", "Seven plus eight is fifteen.", "Seven plus eight is thirteen."),
    JudgeTask("birthday", "Wish me a happy birthday in a high, excited voice.",
              "high", "Happy birthday! I hope all your wishes come true.",
              "I am sorry, I do not know what day it is."),
    JudgeTask("thunder", "In a low, serious voice, explain what causes thunder.",
              "low", "Thunder is the sound of air expanding rapidly when lightning heats it.",
              "Thunder is caused by clouds bumping into mountains."),
    JudgeTask("directions", "Slowly, tell me which way the sun rises.",
              "slow", "The sun rises in the east.", "The sun rises in the west."),
    JudgeTask("tongue-twister", "Say the phrase red lorry, yellow lorry quickly.",
              "fast", "Red lorry, yellow lorry.", "Blue lorry, green bus."),
    JudgeTask("compliment", "In a high, friendly voice, give me a compliment.",
              "high", "You have a wonderful sense of humour.",
              "Your report contains several errors."),
    JudgeTask("weather-report", "In a deep announcer voice, say that rain is expected tomorrow.",
              "low", "Rain is expected across the region tomorrow.",
              "Tomorrow will be hot and completely dry."),
    JudgeTask("seasons", "Slowly, list the four seasons of the year.",
              "slow", "Spring, summer, autumn and winter.", "Morning, noon, evening and night."),
    JudgeTask("spell-cat", "Quickly spell the word cat.", "fast", "C, A, T.", "K, A, T, T."),
    JudgeTask("apology", "In a low, gentle voice, apologise for being late.",
              "low", "I am very sorry that I am late, thank you for waiting.",
              "Let's start the meeting, we have a lot to cover."),
    JudgeTask("cheer", "Cheer for my team in a high, energetic voice.",
              "high", "Go team, go! You can do it!", "The match has been postponed until next week."),
)
